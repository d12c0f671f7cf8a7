"""Names to versions: a backbone name or glob, a version (vN or a tag; default latest) and the
series filters (benchmark, distractor source, estimator). Pure: works on a list of versions."""

from __future__ import annotations

from difflib import get_close_matches
from fnmatch import fnmatchcase

from rscale.errors import NotFoundError
from rscale.store.catalog import Version


def resolve(catalog: list[Version], name: str, version: str | None = None, benchmark: str | None = None,
            source: str | None = None, estimator: str | None = None) -> list[Version]:
    """One version per matching series. Unknown names raise NotFoundError with near matches."""
    pool = [v for v in catalog if fnmatchcase(v.backbone, name)
            and (benchmark is None or v.benchmark == benchmark)
            and (source is None or v.source == source)
            and (estimator is None or v.estimator == estimator)]
    if not pool:
        named = [v for v in catalog if fnmatchcase(v.backbone, name)]
        if named:          # the name is right, a filter is not: say what the name has
            raise NotFoundError(_no_series(name, named, benchmark=benchmark, source=source, estimator=estimator))
        names = sorted({v.backbone for v in catalog})
        near = get_close_matches(name, names, n=1)
        hint = f" Did you mean '{near[0]}'?" if near else ""
        raise NotFoundError(f"unknown backbone '{name}' (known: {', '.join(names) or 'none: the registry is empty'})."
                            f"{hint}")
    want = version or "latest"
    picked = []
    for key in sorted({v.series for v in pool}):
        hit = [v for v in pool if v.series == key and names_version(v, want)]
        if hit:
            picked.append(hit[0])
    if not picked:
        raise NotFoundError(f"{name} has no version '{want}' (has: {', '.join(version_names(pool))})")
    return picked


def names_version(v, want: str) -> bool:
    """Whether ``want`` names the version ``v`` (a hardness version or an artifact: anything with
    ``version`` and ``tags``): ``vN`` by number, anything else as a tag (``latest`` included)."""
    if want.startswith("v") and want[1:].isdigit():
        return v.version == int(want[1:])
    return want in v.tags


def version_names(pool) -> list[str]:
    """Every name the versions of ``pool`` answer to: vN and their tags."""
    return sorted({f"v{v.version}" for v in pool} | {t for v in pool for t in v.tags})


def _no_series(name: str, named: list[Version], **filters) -> str:
    """'backbone X has no series on B' with the series it has and the nearest value asked wrongly."""
    asked = {k: val for k, val in filters.items() if val is not None}
    what = ", ".join(f"{k} '{val}'" for k, val in asked.items())
    hints = []
    for key, val in asked.items():
        have = sorted({getattr(v, key) for v in named})
        if val not in have:
            near = get_close_matches(val, have, n=1)
            hints.append(f"{key} '{near[0]}'" if near else f"{key} one of {', '.join(have)}")
    series = "; ".join(sorted({f"on {v.benchmark} using {v.estimator} (source {v.source})" for v in named}))
    return f"backbone '{name}' has no series with {what} (it has: {series})." + \
        (f" Did you mean {' and '.join(hints)}?" if hints else "")


def resolve_one(catalog: list[Version], name, version=None, benchmark=None, source=None, estimator=None) -> Version:
    found = resolve(catalog, name, version, benchmark, source, estimator)
    if len(found) > 1:
        opts = "; ".join(f"on {v.benchmark} using {v.estimator} (source {v.source})" for v in found)
        raise NotFoundError(f"'{name}' matches several series: {opts}. Narrow it with on/using")
    return found[0]


__all__ = ["names_version", "resolve", "resolve_one", "version_names"]
