"""Connecting to Ray: a local instance by default (``ray.init(num_cpus=...)``), or a running
cluster (``address``: ``auto``, ``ray://head:10001``, ``host:6379``).

A session reuses an instance already initialised in the process (a notebook, a test fixture) and
leaves it running; one it started itself it shuts down at the end.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from rscale.errors import InvalidArgumentError, MissingExtraError

ENGINES = ("local", "ray")


def import_ray():
    """The ``ray`` module with Ray Data, or MissingExtraError naming the ``distributed`` extra."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise MissingExtraError("ray[data]", "distributed") from None
    return ray


def check_engine(engine: str, address: str | None) -> None:
    """Refuse an unknown engine, or an address without the Ray engine, before any work; the Ray
    engine also needs Ray installed."""
    if engine not in ENGINES:
        raise InvalidArgumentError(f"unknown engine {engine!r}; use local or ray")
    if address is not None and engine != "ray":
        raise InvalidArgumentError("--address names a Ray cluster: pass it with --engine ray")
    if engine == "ray":
        import_ray()


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None):
    """Yield the ray module connected to ``address`` or to a local instance of ``num_cpus`` CPUs
    (default: the CPUs this process may use)."""
    ray = import_ray()
    if address:
        check_reachable(address)
    if ray.is_initialized():
        yield ray
        return
    import logging
    kw = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        if address:
            ray.init(address=address, **kw)
        else:
            ray.init(num_cpus=num_cpus or usable_cpus(), **kw)
    except ConnectionError as exc:
        raise InvalidArgumentError(f"cannot reach a Ray cluster at {address!r} ({exc}); start one with "
                                   "`ray start --head` or leave out --address for a local instance") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) nobody listens on at once: Ray itself retries
    an unreachable head for minutes. ``auto`` is left to Ray."""
    import socket

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot reach a Ray cluster at {address!r} ({exc.strerror or exc}); start one "
                                   "with `ray start --head` or leave out --address for a local instance") from None


def cluster_cpus(ray) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def cluster_gpus(ray) -> int:
    return int(ray.cluster_resources().get("GPU", 0))
