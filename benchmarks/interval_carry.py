"""Coverage and width of the benchmark-value interval under the back-test carry rule, on held-out
set ``cov1`` (simulator) and on the two real-embedding sets, for evt and evt-eb, side by side
with the previous rule (docs/benchmarks.md, "Carrying the back-test to the user's factor").

``cov1`` was written down (with the target) before the chosen carry rule was measured on it; it
is a check, not a design set: new laws, query counts and a new seed offset, with the families
the target names (near-duplicate, gaussian, bounded, student) and one shoulder scenario.

Run: PYTHONPATH=src .venv/bin/python benchmarks/interval_carry.py --set cov1 [--methods evt,evt-eb]
     [--fractions 0.01,0.02,0.05,0.1] [--json rows.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rscale.sim.benchmark import HardnessLaw  # noqa: E402

# Held out (--set cov1): written down before the chosen carry rule was measured on any set but the
# design data (design, holdout, fresh..fresh5); no choice was made on it.
COV1 = [
    ("neardup/power a1.25 cov", "neardup", HardnessLaw("power", 1.25, 1e-12, 1e-1, immune=0.04, rho=0.2), 1150),
    ("neardup/loguniform cov", "neardup", HardnessLaw("loguniform", 1.0, 1e-11, 1.0, immune=0.03, rho=0.5), 1050),
    ("gaussian/loguniform cov", "gaussian", HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.03, rho=0.3), 1200),
    ("gaussian/power a1.4 cov", "gaussian", HardnessLaw("power", 1.4, 1e-12, 1e-1, immune=0.04, rho=0.6), 1000),
    ("bounded/loguniform cov", "bounded", HardnessLaw("loguniform", 1.0, 1e-13, 1e-1, immune=0.01, rho=0.4), 1100),
    ("student/power a1.2 cov", "student", HardnessLaw("power", 1.2, 1e-12, 1e-1, immune=0.03, rho=0.4), 1000),
    ("student/loguniform cov", "student", HardnessLaw("loguniform", 1.0, 1e-10, 1e-2, immune=0.05, rho=0.2), 1200),
    ("shoulder/power a1.3 cov", "shoulder", HardnessLaw("power", 1.3, 1e-11, 1e-1, immune=0.05, rho=0.5), 950),
]
COV1_SEED = 410_000
