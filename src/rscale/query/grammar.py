"""The ``rscale query`` language: a small grammar, parsed to a frozen value with one canonical string.

Grammar (words are case-insensitive; spaces around ``,`` ``=`` ``@`` are free)::

    query     := measures [ "at" sizes ] [ "for" backbones ] [ reranked ] [ "on" benchmark ]
                 [ "using" estimator ] [ "expected" | "plugin" ]
    measures  := measure { "," measure }          mAP@1000, R@1, Recall@100, MRR (aliases fold)
    sizes     := "N" "=" size { "," size }         1e8, 759k, 5M, 1.2B, 100_000_000 (whole numbers >= 1)
    backbones := ref { "," ref } | ref versus ref  dinov3_l, siglip2_l@v2, dino*@released, *
    versus    := "vs" | "-"                        a paired difference: the first minus the second
    ref       := name-or-glob [ "@" version ]      version: v<k>, latest, released (or any tag)
    reranked  := "reranked" "@" depth              K': the first-stage top K' is reranked (whole number)

The clauses after the measures may come in any order; each at most once. ``reranked@K'`` asks
for every backbone's metric after its first-stage top K' is reranked (docs/rerank.md), answered
from the reranked input a version keeps when it was registered from sample stats with rerank
scores. ``for A vs B`` (or ``for A - B``) asks for the paired difference A - B of two versions
estimated from the same distractor sample, with the interval of the difference from paired
replicates (:func:`rscale.core.interval.difference_intervals`). Canonical form::

    mAP@1000, R@1 at N=1e6,1e8 for dinov3_l, siglip2_l reranked@1000 on ilias using evt expected
    mAP@1000 at N=1e8 for dinov3_l vs dinov2_b@v2

``parse(str(q)) == q`` for every query (tested as a property). Errors list every problem found,
each with a caret under the offending part of the query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rscale.errors import QuerySyntaxError
from rscale.query.measures import Measure

KEYWORDS = ("at", "for", "on", "using")
VERSUS = ("vs", "-")          # between the two backbones of a paired difference; canonical "vs"
MODES = ("expected", "plugin")
RERANKED = "reranked"
_DEPTH = re.compile(r"^reranked@(?P<depth>[0-9][0-9_]*)$", re.IGNORECASE)
_TOKEN = re.compile(r"\s*(?:(?P<punct>[,=])|(?P<word>[^\s,=]+))")
_SIZE = re.compile(r"^(?P<num>[0-9][0-9_]*(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?P<suffix>[kKmMbB]?)$")
_REF = re.compile(r"^(?P<name>[A-Za-z0-9_.*?\[\]\-]+)(?:@(?P<version>[A-Za-z0-9_.\-]+))?$")
_MULT = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}


def parse_size(text: str) -> int:
    """A gallery size: 1e8, 759k, 5M, 1.2B, 100_000_000 -> a whole number >= 1 (ValueError otherwise)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"cannot read gallery size {text!r}")
    value = float(m.group("num").replace("_", "")) * _MULT[m.group("suffix").lower()]
    if value < 1 or not float(value).is_integer() or value > 1e15:
        raise ValueError(f"gallery size {text!r} must be a whole number between 1 and 1e15")
    return int(value)


def format_size(n: int) -> str:
    """Canonical spelling of a size: 1e8, 759k, 5M, 1.2B -> 1200M, 1234."""
    n = int(n)
    e = len(str(n)) - 1
    if n >= 10 and n == 10 ** e:
        return f"1e{e}"
    for suffix, mult in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


@dataclass(frozen=True)
class BackboneRef:
    name: str                 # a name or a glob (* ? [..])
    version: str | None = None  # "v2", "latest", "released", ... ; None = latest

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Query:
    measures: tuple[Measure, ...]
    sizes: tuple[int, ...] = ()
    backbones: tuple[BackboneRef, ...] = ()
    benchmark: str | None = None
    estimator: str | None = None
    mode: str | None = None
    rerank_depth: int | None = None    # K' of a ``reranked@K'`` clause; None: first-stage metrics
    paired: bool = False               # ``for A vs B``: the difference backbones[0] - backbones[1]

    def __str__(self) -> str:
        parts = [", ".join(str(m) for m in self.measures)]
        if self.sizes:
            parts.append("at N=" + ",".join(format_size(n) for n in self.sizes))
        if self.backbones:
            parts.append("for " + (" vs " if self.paired else ", ").join(str(b) for b in self.backbones))
        if self.rerank_depth is not None:
            parts.append(f"{RERANKED}@{self.rerank_depth}")
        if self.benchmark:
            parts.append(f"on {self.benchmark}")
        if self.estimator:
            parts.append(f"using {self.estimator}")
        if self.mode:
            parts.append(self.mode)
        return " ".join(parts)


def _tokens(text: str):
    pos = 0
    out = []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        kind = "punct" if m.group("punct") else "word"
        value = m.group(kind)
        start = m.start(kind)
        out.append((kind, value, start))
        pos = m.end()
    return out


def _keyword_hint(word: str) -> str:
    from difflib import get_close_matches
    near = get_close_matches(word.lower().partition("@")[0], KEYWORDS + MODES + (RERANKED, "vs"), n=1, cutoff=0.6)
    return f" (did you mean '{near[0]}'?)" if near else " (missing comma?)"


def _shown(text: str) -> tuple[str, list[int]]:
    """``text`` with every non-printable character (ESC, tab, newline, bidi overrides, ...)
    written as its Python escape, so echoing a query cannot drive the terminal; and where each
    original character starts in the shown string (one more entry for the end)."""
    parts, where, at = [], [], 0
    for ch in text:
        shown = ch if ch.isprintable() else repr(ch)[1:-1]
        where.append(at)
        parts.append(shown)
        at += len(shown)
    where.append(at)
    return "".join(parts), where


def _caret(text: str, problems) -> str:
    prefix = "cannot parse query: "
    shown, where = _shown(text)
    lines = [prefix + shown]
    for start, length, msg in problems:
        a = where[min(start, len(text))]
        b = where[min(start + max(length, 1), len(text))]
        lines.append(" " * (len(prefix) + a) + "^" * max(b - a, 1) + f"  {_shown(msg)[0]}")
    return "\n".join(lines)


def parse(text: str) -> Query:
    """Parse a query string (see the module docstring); raise QuerySyntaxError with carets."""
    if not text or not text.strip():
        raise QuerySyntaxError("empty query; write e.g. \"mAP@1000 at N=1e8 for dinov3_l\"")
    toks = _tokens(text)
    problems = []
    # split into clauses at keywords / modes
    clauses = {"measures": []}
    order = ["measures"]
    current = "measures"
    for kind, value, start in toks:
        low = value.lower()
        if kind == "word" and low in KEYWORDS:
            if low in clauses:
                problems.append((start, len(value), f"'{low}' appears twice"))
            current = low
            clauses.setdefault(current, [])
            order.append(current)
            continue
        if kind == "word" and (low == RERANKED or low.startswith(RERANKED + "@")):
            if RERANKED in clauses:
                problems.append((start, len(value), f"'{RERANKED}' appears twice"))
            current = RERANKED
            clauses[current] = [(kind, value, start)]
            order.append(current)
            continue
        if kind == "word" and low in MODES:
            if "mode" in clauses:
                problems.append((start, len(value), "the mode (expected/plugin) appears twice"))
            clauses["mode"] = [(kind, low, start)]
            current = "after-mode"
            clauses.setdefault(current, [])
            continue
        clauses.setdefault(current, []).append((kind, value, start))
    for kind, value, start in clauses.get("after-mode", []):
        problems.append((start, len(value), "unexpected text after the mode"))

    measures = _parse_list(clauses["measures"], problems, _measure, "a measure such as mAP@1000",
                           end=len(text))
    sizes = ()
    if "at" in clauses:
        sizes = _parse_sizes(clauses["at"], problems, len(text))
    backbones, paired = (), False
    if "for" in clauses:
        backbones, paired = _parse_backbones(clauses["for"], problems, len(text))
    benchmark = _single(clauses.get("on"), problems, "benchmark", len(text))
    estimator = _single(clauses.get("using"), problems, "estimator", len(text))
    mode = clauses["mode"][0][1] if "mode" in clauses else None
    depth = _rerank_depth(clauses[RERANKED], problems) if RERANKED in clauses else None
    if problems:
        raise QuerySyntaxError(_caret(text, sorted(problems)))
    return Query(tuple(measures), tuple(sizes), tuple(backbones), benchmark, estimator, mode, depth, paired)


def _parse_backbones(tokens, problems, end):
    """The ``for`` clause: a comma list of refs, or exactly two refs around ``vs`` (or ``-``)."""
    at = [i for i, (kind, value, _) in enumerate(tokens) if kind == "word" and value.lower() in VERSUS]
    if not at:
        return _parse_list(tokens, problems, _backbone, "a backbone name", end=end), False
    commas = [t for t in tokens if t[0] == "punct" and t[1] == ","]
    if len(at) > 1 or commas:
        _, value, start = tokens[at[1]] if len(at) > 1 else commas[0]
        problems.append((start, len(value), "a paired difference compares two backbones: write 'for A vs B'"))
        return (), True
    i = at[0]
    sides = []
    for part, where in ((tokens[:i], tokens[i][2]), (tokens[i + 1:], end)):
        if not part:
            problems.append((where, 1, f"expected a backbone name {'before' if where != end else 'after'} "
                                       f"'{tokens[i][1]}'"))
            continue
        sides += _parse_list(part, problems, _backbone, "a backbone name", end=end)
    return tuple(sides), True


def _rerank_depth(tokens, problems):
    """K' of ``reranked@K'`` (spaces around '@' are free), a whole number >= 1."""
    start = tokens[0][2]
    if any(kind == "punct" for kind, _, _ in tokens):
        kind, value, at = next(t for t in tokens if t[0] == "punct")
        problems.append((at, 1, f"unexpected '{value}' in the reranked clause; write e.g. reranked@1000"))
        return None
    text = "".join(value for _, value, _ in tokens)
    end = tokens[-1][2] + len(tokens[-1][1])
    m = _DEPTH.match(text)
    depth = int(m.group("depth").replace("_", "")) if m else 0
    if not m or not 1 <= depth <= 10**15:
        what = "say how many first-stage candidates are reranked" if text.lower() == RERANKED else \
            f"cannot read the rerank depth in {text!r}"
        problems.append((start, end - start, f"{what}; write e.g. reranked@1000 (K' = 1000, a whole number >= 1)"))
        return None
    return depth


def _measure(value, start, problems):
    try:
        return Measure.parse(value)
    except ValueError as exc:
        problems.append((start, len(value), str(exc)))


def _backbone(value, start, problems):
    m = _REF.match(value)
    if not m:
        problems.append((start, len(value), f"cannot read backbone {value!r}; write name or name@v2"))
        return None
    return BackboneRef(m.group("name"), m.group("version"))


def _parse_list(tokens, problems, item, what, end):
    """Comma-separated items; words glued by '@' with spaces are rejoined (mAP @ 1000)."""
    words = []
    groups, cur = [], []
    for kind, value, start in tokens:
        if kind == "punct" and value == ",":
            groups.append(cur)
            cur = []
        elif kind == "punct":
            problems.append((start, 1, f"unexpected '{value}'"))
        else:
            cur.append((value, start))
    groups.append(cur)
    if not tokens:
        problems.append((end, 1, f"expected {what}"))
        return words
    for g in groups:
        if not g:
            problems.append((tokens[-1][2] if tokens else end, 1, f"expected {what} here"))
            continue
        start = g[0][1]
        loose = [i for i in range(1, len(g)) if not (g[i - 1][0].endswith("@") or g[i][0].startswith("@"))]
        if loose:
            # two words without a comma: most likely a missing comma or a misspelt keyword
            v, at = g[loose[0]]
            problems.append((at, len(v), f"unexpected word {v!r}{_keyword_hint(v)}"))
            continue
        value = "".join(v for v, _ in g)
        parsed = item(value, start, problems)
        if parsed is not None:
            words.append(parsed)
    return words


def _parse_sizes(tokens, problems, end):
    if not tokens or tokens[0][1].lower() != "n":
        where = tokens[0][2] if tokens else end
        problems.append((where, len(tokens[0][1]) if tokens else 1, "expected N=<size> after 'at'"))
        return ()
    if len(tokens) < 2 or tokens[1][1] != "=":
        problems.append((tokens[0][2], 1, "expected '=' after N"))
        return ()
    sizes = []
    expect_value = True
    for kind, value, start in tokens[2:]:
        if kind == "punct" and value == ",":
            if expect_value:
                problems.append((start, 1, "expected a size before ','"))
            expect_value = True
            continue
        if not expect_value:
            problems.append((start, len(value), f"unexpected {value!r}{_keyword_hint(value)}"))
            break
        try:
            sizes.append(parse_size(value))
        except ValueError as exc:
            problems.append((start, len(value), f"{exc}; write e.g. 1e8, 759k or 100_000_000"))
        expect_value = False
    if expect_value:
        problems.append((end, 1, "expected a size"))
    return tuple(sizes)


def _single(tokens, problems, what, end):
    if tokens is None:
        return None
    words = [t for t in tokens if t[0] == "word"]
    if len(words) != 1 or len(tokens) != 1:
        where = tokens[0][2] if tokens else end
        problems.append((where, 1, f"expected one {what} name"))
        return None
    return words[0][1]
