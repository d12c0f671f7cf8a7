"""Named simulated backbones: the embedded default data (clearly simulated, never real models).

Each preset pairs a tail family with a hardness profile. mAP@1000 at 1e8 spans 0.35-0.7 and a 5%
sample alone is optimistic by 0.1-0.15, the count estimator by 0.05-0.08, close to what the
tail-aware evaluation paper reports for real ViT backbones on ILIAS (+0.08..+0.13, +0.04..+0.07).
"""

from __future__ import annotations

from rscale.errors import InvalidArgumentError
from rscale.sim.benchmark import HardnessLaw, SimSpec

PRESETS: dict[str, SimSpec] = {
    "sim_bounded": SimSpec(name="sim_bounded", family="bounded", n_queries=1000,
                           hardness=HardnessLaw("power", 1.2, 1e-10, 1.0, immune=0.05)),
    "sim_gaussian": SimSpec(name="sim_gaussian", family="gaussian", n_queries=1000,
                            hardness=HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.02)),
    "sim_neardup": SimSpec(name="sim_neardup", family="neardup", n_queries=1000,
                           hardness=HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.03)),
}


def preset(name: str) -> SimSpec:
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown simulated backbone {name!r} (known: {', '.join(PRESETS)})") from None
