"""The one reader of params.yaml-style configuration files."""

from __future__ import annotations


def load_config(path, section: str | None = None) -> dict:
    """A params.yaml-style file as a dict, or one mapping section of it (e.g. ``estimate``).

    The one reader of configuration files (the CLI's ``--config``, the pipeline demo).
    """
    import yaml

    from rscale.errors import FormatError
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except (FileNotFoundError, IsADirectoryError):
        raise FormatError("file not found", path=str(path)) from None
    except yaml.YAMLError as exc:
        raise FormatError(f"not valid YAML ({exc})", path=str(path)) from None
    if not isinstance(data, dict):
        raise FormatError("expected a mapping of sections (see params.yaml)", path=str(path))
    if section is None:
        return data
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
    method = str(cfg.get("method", "evt-eb"))
    params = cfg.get(method) or {}
    if not isinstance(params, dict):
        from rscale.errors import FormatError
        raise FormatError(f"'estimate.{method}' must be a mapping of parameters", path=str(path))
    return method, [f"{k}={v}" for k, v in sorted(params.items())]
