"""The one reader of params.yaml-style configuration files."""

from __future__ import annotations


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
