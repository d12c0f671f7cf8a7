"""The fifth real-embedding validation set (docs/realset5.md): the world's other scripts, and Latin
typefaces outside realset3's, across typefaces.

The glyph set of docs/realset3.md built from another corpus (Indic, Thai, Lao, Khmer, Tibetan,
Myanmar, Sinhala, Arabic, Ethiopic, Hebrew and Greek typefaces, and Latin, IPA and symbol
typefaces that realset3 did not have), by the same rules and the same code
(``benchmarks/realset3/build.py``, loaded by file), with one rule added: no codepoint that is a
query of realset3 or realset4 is a query here. Held out: nothing is measured on it until the round
that uses it has written down its rule (docs/realset5.md).

Run (docs/realset5.md, "Rebuilding"):
  PYTHONPATH=src .venv/bin/python benchmarks/realset5/build.py corpus --work /tmp/realset5
  PYTHONPATH=src .venv/bin/python benchmarks/realset5/build.py embed --work /tmp/realset5 &
  PYTHONPATH=src .venv/bin/python benchmarks/realset5/build.py embed --work /tmp/realset5
  PYTHONPATH=src .venv/bin/python benchmarks/realset5/build.py score --work /tmp/realset5 --out benchmarks/realset5/data
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = (
    # Indic and Sinhala
    "fonts-lohit-beng-assamese", "fonts-lohit-beng-bengali", "fonts-lohit-deva", "fonts-lohit-deva-marathi",
    "fonts-lohit-deva-nepali", "fonts-lohit-gujr", "fonts-lohit-guru", "fonts-lohit-knda", "fonts-lohit-mlym",
    "fonts-lohit-orya", "fonts-lohit-taml", "fonts-lohit-taml-classical", "fonts-lohit-telu",
    "fonts-samyak-deva", "fonts-samyak-gujr", "fonts-samyak-mlym", "fonts-samyak-orya", "fonts-samyak-taml",
    "fonts-smc-anjalioldlipi", "fonts-smc-chilanka", "fonts-smc-dyuthi", "fonts-smc-gayathri", "fonts-smc-karumbi",
    "fonts-smc-keraleeyam", "fonts-smc-manjari", "fonts-smc-meera", "fonts-smc-rachana",
    "fonts-smc-raghumalayalamsans", "fonts-smc-suruma", "fonts-smc-uroob",
    "fonts-gargi", "fonts-sarai", "fonts-nakula", "fonts-sahadeva", "fonts-kalapi", "fonts-teluguvijayam",
    "fonts-taml-tscu", "fonts-sil-annapurna", "fonts-lklug-sinhala",
    # Thai, Lao, Khmer, Myanmar, Tibetan
    "fonts-tlwg-garuda-ttf", "fonts-tlwg-kinnari-ttf", "fonts-tlwg-laksaman-ttf", "fonts-tlwg-loma-ttf",
    "fonts-tlwg-mono-ttf", "fonts-tlwg-norasi-ttf", "fonts-tlwg-purisa-ttf", "fonts-tlwg-sawasdee-ttf",
    "fonts-tlwg-typewriter-ttf", "fonts-tlwg-typist-ttf", "fonts-tlwg-typo-ttf", "fonts-tlwg-umpush-ttf",
    "fonts-tlwg-waree-ttf", "fonts-khmeros", "fonts-lao", "fonts-sil-padauk", "fonts-sil-mondulkiri",
    "fonts-tibetan-machine",
    # Arabic, Ethiopic, Hebrew
    "fonts-kacst", "fonts-kacst-one", "fonts-hosny-amiri", "fonts-hosny-thabit", "fonts-arabeyes",
    "fonts-sil-scheherazade", "fonts-sil-lateef", "fonts-sil-harmattan", "fonts-sil-awami-nastaliq",
    "fonts-sil-abyssinica", "fonts-sil-ezra",
    # Greek
    "fonts-gfs-artemisia", "fonts-gfs-baskerville", "fonts-gfs-bodoni-classic", "fonts-gfs-complutum",
    "fonts-gfs-didot", "fonts-gfs-didot-classic", "fonts-gfs-gazis", "fonts-gfs-neohellenic", "fonts-gfs-olga",
    "fonts-gfs-porson", "fonts-gfs-solomos", "fonts-gfs-theokritos",
    # Latin, IPA and symbols
    "fonts-sil-gentiumplus", "fonts-sil-charis", "fonts-sil-doulos", "fonts-sil-andika", "fonts-junicode",
    "fonts-stix", "fonts-cmu", "fonts-open-sans", "fonts-lato", "fonts-roboto-unhinted", "fonts-cantarell",
    "fonts-comic-neue", "fonts-hack-ttf", "fonts-inconsolata", "fonts-jetbrains-mono", "fonts-firacode", "fonts-go",
    "fonts-yrsa-rasa", "fonts-cabin", "fonts-league-spartan", "fonts-oflb-euterpe", "fonts-goudybookletter",
    "fonts-gotico-antiqua", "fonts-symbola",
)
BENCHMARK = "realset5-script-glyphs"
# the glyph sets whose queries' codepoints are not queries here (their committed qrels name them)
OTHER_GLYPH_SETS = ("realset3", "realset4")


def glyph_build():
    """benchmarks/realset3/build.py, the glyph sets' one build."""
    spec = importlib.util.spec_from_file_location("realset3_build", HERE.parent / "realset3" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def other_sets_query_codepoints(root: Path = HERE.parent) -> set[int]:
    """The codepoints of the queries of realset3 and realset4, read from their committed qrels
    (a query id is ``q:U+XXXX:FONT``)."""
    import pyarrow.parquet as pq
    cps = set()
    for name in OTHER_GLYPH_SETS:
        for qid in set(pq.read_table(root / name / "data" / "qrels.parquet", columns=["query_id"])["query_id"]
                       .to_pylist()):
            cps.add(int(qid.split(":")[1][2:], 16))
    return cps


def main(argv=None):
    return glyph_build().main(argv, packages=PACKAGES, benchmark=BENCHMARK, doc="docs/realset5.md",
                              data=HERE / "data", description=__doc__.split("\n")[0],
                              not_queries=other_sets_query_codepoints)


if __name__ == "__main__":
    main()
