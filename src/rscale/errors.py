"""One exception hierarchy. Each error also inherits the matching builtin so callers
that catch ValueError / FileNotFoundError keep working."""

from __future__ import annotations


class RscaleError(Exception):
    """Base of every error rscale raises on purpose. The CLI prints its message, no traceback."""

    exit_code = 2


class InvalidArgumentError(RscaleError, ValueError):
    """A function or command got an argument outside its domain (N < 1, k < 1, ...)."""


class QuerySyntaxError(RscaleError, ValueError):
    """A query string does not follow the grammar; the message points at each problem with a caret."""


class NotFoundError(RscaleError, LookupError):
    """An artifact, backbone or version is not in the registry; the message suggests near matches."""


class RegistryError(RscaleError, RuntimeError):
    """The registry is missing, locked for too long, or inconsistent; the message names the fix."""


class FormatError(RscaleError, ValueError):
    """A file does not follow its documented format.

    Carries the file, column and first bad row so the message can point at them.
    """

    def __init__(self, problem: str, *, path: str | None = None, column: str | None = None,
                 row: int | None = None, hint: str | None = None):
        self.problem = problem
        self.path = path
        self.column = column
        self.row = row
        self.hint = hint
        where = []
        if path:
            where.append(str(path))
        if column:
            where.append(f"column '{column}'")
        if row is not None:
            where.append(f"row {row}")
        msg = (": ".join([", ".join(where), problem]) if where else problem)
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class SchemaVersionError(FormatError):
    """A file was written by another (usually newer) schema version."""


class MissingExtraError(RscaleError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, module: str, extra: str):
        super().__init__(f"this needs '{module}', which is not installed. "
                         f"Install it with: pip install 'rscale[{extra}]'")


class MissingSystemLibraryError(RscaleError, OSError):
    """A system library an optional path loads is missing or unusable (libEGL for the pyrender
    renderer); the message names the library, the package that provides it and the alternative."""
