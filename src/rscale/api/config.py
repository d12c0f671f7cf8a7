"""Configuration files and the code version recorded in lineage."""

from __future__ import annotations


def code_version() -> str:
    """rscale's version plus the git commit of the working directory when there is one."""
    import subprocess

    from rscale import __version__
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    return f"rscale {__version__}" + (f" git {commit}{'+dirty' if dirty else ''}" if commit else "")


def load_config(path, section: str) -> dict:
    """One section of a params.yaml-style file (e.g. ``estimate``), as a dict."""
    import yaml

    from rscale.errors import FormatError
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise FormatError("file not found", path=str(path)) from None
    except yaml.YAMLError as exc:
        raise FormatError(f"not valid YAML ({exc})", path=str(path)) from None
    if section not in data or not isinstance(data[section], dict):
        raise FormatError(f"no '{section}:' section", path=str(path),
                          hint=f"add a mapping under '{section}:' (see params.yaml)")
    return dict(data[section])


def estimator_from_config(path) -> tuple[str, list[str]]:
    """(method, ['name=value', ...]) from the ``estimate:`` section of a config file.

    The section names the method and may hold one sub-mapping of parameters per method
    (``evt: {q: 0.95}``); only the chosen method's parameters are used, so switching the method
    in an experiment needs no other change.
    """
    cfg = load_config(path, "estimate")
    method = str(cfg.get("method", "evt"))
    params = cfg.get(method) or {}
    if not isinstance(params, dict):
        from rscale.errors import FormatError
        raise FormatError(f"'estimate.{method}' must be a mapping of parameters", path=str(path))
    return method, [f"{k}={v}" for k, v in sorted(params.items())]
