"""The size presets of ``countlens reproduce`` and ``countlens study``: one table, per preset the config of
every stage.

``quick`` is ``make demo`` (sized to fit 15 minutes on 2 cores with the install: BENCHMARKS.md), ``full`` the
paper's sizes, ``test`` tiny sizes for the test suite. The rooms' config classes hold the defaults (their
reduced sizes) and ``.paper()`` (the paper's); only what differs is written here. Paths in a config are
relative to the report folder (``OUT``): a stage reads the outputs of the stages before it there.
"""

from __future__ import annotations

from typing import Any

from countlens.analysis.experiments import CompareConfig, GeometryConfig
from countlens.llm import (
    CaptureConfig,
    HeadsConfig,
    LensConfig,
    PatchingConfig,
    PositionPatchingConfig,
    SteeringConfig,
)
from countlens.llm.prompts import DEFAULT_PAIRS, PromptSettings
from countlens.probes.experiments import ProbeConfig, SweepConfig
from countlens.toy.experiments import (
    ConstructionsConfig,
    Figure1Config,
    Figure2Config,
    Figure3Config,
    Figure4Config,
    LcapConfig,
    RatesConfig,
    Table2Config,
    Table3Config,
)

# Where each stage's output lies inside OUT, for the stages that read it.
ACTS = "capture/acts"
ITEM_ACTS = "capture-items/acts"  # the capture at every item (Figure 10)
PROBES = "probe/probes.json"
TABLE3 = "toy-table3/table3.json"
CONSTRUCTIONS = "toy-construct"
COMPARE_VARIANTS = ("linear", "softmax", "softmax-postln-bare", "softmax-postln-learned")

_COUNTS = list(range(0, 101))
_WINDOWS = {"low": (1, 10), "high": (91, 100), "pca_counts": (1, 100)}
_TEST_WINDOWS = {"low": (1, 4), "high": (8, 11), "pca_counts": (1, 11)}


def _analysis(windows: dict[str, tuple[int, int]], constructions: ConstructionsConfig,
              arc_counts: tuple[int, int]) -> dict[str, Any]:
    """The stages that read the capture: probes, sweep, geometry and the toy-vs-LLM comparison."""
    return {"probe": ProbeConfig(acts=ACTS), "probe-sweep": SweepConfig(acts=ACTS),
            "geometry": GeometryConfig(acts=ACTS, **windows),
            "compare": CompareConfig(toy=(CONSTRUCTIONS,), acts=ACTS, toy_L=constructions.L, arc_counts=arc_counts,
                                     **windows)}


def _where(items: CaptureConfig, running: ProbeConfig, positions: PositionPatchingConfig, heads: HeadsConfig,
           lens: LensConfig) -> dict[str, Any]:
    """The stages that ask where the count is formed and why the answer is wrong (Figures 10-13)."""
    return {"capture-items": items, "probe-running": running, "patching-positions": positions, "heads": heads,
            "lens": lens}


# Every 4th location from the embeddings, and the last: a spec that fits any depth (SmolLM2-135M: 9 of 31).
_ITEM_LOCATIONS = "0:-1:4,-1"
# Short lists (L = 24: every count 0..24 once per token pair), so every item is a row: 100 prompts, 1,300 rows.
_QUICK_ITEMS = CaptureConfig(prompts=PromptSettings(L=24, counts=list(range(0, 25)), per_count=1, seeds=[0],
                                                    configs=["count"]), locations=_ITEM_LOCATIONS, positions="items")

_QUICK_CONSTRUCT = ConstructionsConfig(variants=COMPARE_VARIANTS, d=16, L=100)
_TEST_CONSTRUCT = ConstructionsConfig(variants=COMPARE_VARIANTS, d=4, L=12)

PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "toy-rates": RatesConfig.paper(), "toy-lcap": LcapConfig(), "toy-table2": Table2Config(),
        "toy-table3": Table3Config(attained=True), "toy-figure1": Figure1Config(),
        "toy-figure2": Figure2Config(table3=TABLE3), "toy-figure3": Figure3Config(), "toy-figure4": Figure4Config(),
        "toy-construct": _QUICK_CONSTRUCT,
        # All four token pairs (Figure 5 averages them, as the paper does), one wording and one seed: 404
        # prompts, each with the model's own answer (Figure 7's behaviour line): the share of the 15 minutes
        # the capture can have (BENCHMARKS.md).
        "capture": CaptureConfig(prompts=PromptSettings(L=256, counts=_COUNTS, per_count=1, seeds=[0],
                                                        configs=["count"]), answers=True),
        **_analysis(_WINDOWS, _QUICK_CONSTRUCT, (1, 100)),
        "patching": PatchingConfig(),
        # Count units (a step of 1 moves the vector as far as one more item does), along the probe and the
        # mean-difference direction, each with its random control of the same norm.
        "steering": SteeringConfig(acts=ACTS, probes=PROBES, max_prompts=4, units="count",
                                   directions=["probe", "mean-diff"]),
        **_where(_QUICK_ITEMS, ProbeConfig(acts=ITEM_ACTS, target="running_count"),
                 PositionPatchingConfig(location_step=2), HeadsConfig(probes=PROBES), LensConfig(acts=ACTS, probes=PROBES)),
    },
    "full": {
        "toy-rates": RatesConfig.paper(), "toy-lcap": LcapConfig(), "toy-table2": Table2Config.paper(),
        "toy-table3": Table3Config.paper(attained=True), "toy-figure1": Figure1Config(),
        "toy-figure2": Figure2Config.paper(table3=TABLE3), "toy-figure3": Figure3Config.paper(),
        "toy-figure4": Figure4Config.paper(), "toy-construct": _QUICK_CONSTRUCT,
        # The capture's own defaults: all four token pairs and every wording, three seeds (3,636 prompts).
        "capture": CaptureConfig(prompts=PromptSettings(L=256, counts=_COUNTS, per_count=1, seeds=[0, 1, 2]),
                                 answers=True),
        **_analysis(_WINDOWS, _QUICK_CONSTRUCT, (1, 100)),
        # Every token pair and wording, three seeds, counts across the range.
        "patching": PatchingConfig(L=256, sources=[40, 30, 20, 10, 5, 3], targets=[3, 5, 10, 20, 30, 40],
                                   pairs=[list(p) for p in DEFAULT_PAIRS], configs=PromptSettings().configs,
                                   seeds=[0, 1, 2]),
        "steering": SteeringConfig(acts=ACTS, probes=PROBES, counts=list(range(5, 51, 5)), max_prompts=40,
                                   units="count", directions=["probe", "mean-diff"]),
        # Lists to 64 items (260 prompts, ~8,700 rows at every 2nd location); patching over positions of four
        # counts with every pair; heads over 96 prompts, 24 ablated.
        **_where(CaptureConfig(prompts=PromptSettings(L=64, counts=list(range(0, 65)), per_count=1, seeds=[0],
                                                      configs=["count"]),
                               locations="0:-1:2,-1", positions="items", shard_rows=64),
                 ProbeConfig(acts=ITEM_ACTS, target="running_count"),
                 PositionPatchingConfig(prompts=PromptSettings(L=24, counts=[3, 6, 9, 12], per_count=1, seeds=[0],
                                                               configs=["count"])),
                 HeadsConfig(prompts=PromptSettings(L=24, counts=list(range(1, 25)), per_count=1, seeds=[0],
                                                    configs=["count"]), ablate_prompts=24, probes=PROBES),
                 LensConfig(acts=ACTS, probes=PROBES)),
    },
    "test": {
        "toy-rates": RatesConfig(d=4, L=(10, 30)), "toy-lcap": LcapConfig(d=(3, 4)),
        "toy-table2": Table2Config(d=(4,), L=(10,), seeds=(0,), steps=5),
        "toy-table3": Table3Config(d=4, B=(10,), attained=True, attained_grid=(5, 10), attained_seeds=(0,),
                                   attained_steps=5),
        "toy-figure1": Figure1Config(L=10),
        "toy-figure2": Figure2Config(d=4, L=(5, 10), seeds=(0,), steps=5, table3=TABLE3),
        "toy-figure3": Figure3Config(d=4, L=10, seeds=(0,), steps=5),
        "toy-figure4": Figure4Config(d=4, L=10, steps=5, minibatch_steps=5, batch_size=16),
        "toy-construct": _TEST_CONSTRUCT,
        "capture": CaptureConfig(prompts=PromptSettings(L=16, counts=list(range(0, 13)), per_count=1, seeds=[0, 1],
                                                        pairs=[["a", "b"]], configs=["count"]),
                                 answers=True, answer_tokens=3),
        **_analysis(_TEST_WINDOWS, _TEST_CONSTRUCT, (1, 11)),
        "patching": PatchingConfig(L=16, sources=[9, 3], targets=[3, 9], answer_tokens=3),
        "steering": SteeringConfig(acts=ACTS, probes=PROBES, deltas=[-2.0, 0.0, 2.0], counts=[3, 6], max_prompts=2,
                                   answer_tokens=3, units="count", directions=["probe", "mean-diff"]),
        **_where(CaptureConfig(prompts=PromptSettings(L=8, counts=list(range(0, 9)), per_count=1, seeds=[0, 1],
                                                      pairs=[["a", "b"]], configs=["count"]),
                               locations=_ITEM_LOCATIONS, positions="items"),
                 ProbeConfig(acts=ITEM_ACTS, target="running_count", position_buckets=4, seeds=(0,)),
                 PositionPatchingConfig(prompts=PromptSettings(L=6, counts=[3], per_count=1, pairs=[["a", "b"]],
                                                               configs=["count"], seeds=[0])),
                 HeadsConfig(prompts=PromptSettings(L=8, counts=[1, 3, 5], per_count=1, pairs=[["a", "b"]],
                                                    configs=["count"], seeds=[0]), ablate_prompts=2, probes=PROBES),
                 LensConfig(acts=ACTS, probes=PROBES, baseline_directions=50)),
    },
}


__all__ = ["ACTS", "ITEM_ACTS", "PROBES", "TABLE3", "CONSTRUCTIONS", "COMPARE_VARIANTS", "PRESETS"]
