"""The organism checks' bounds and verdicts: pure functions of the numbers the experiments computed, each a row
(:func:`check_row`) that holds or fails, so each verdict is tested on numbers built to pass and to fail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

ACCURACY = 0.99
ZERO = 1e-6  # direct logit attribution of a zeroed head: relative to the largest |total| (nats per nat)
DEAD = 1e-6  # nats, absolute: a zeroed head's ablation, measured on the float64 copy
CHANCE_FACTOR = 2.0  # the item-reading head ablated: right-first at most this many times chance
KEPT = 0.99  # position patching: normalised LD the construction fixes at 1
LEAK = 0.01  # ... and at 0
INTERCHANGED = 1.0  # the boundary interchanged after the last live block: exact by construction
PATCHED = 0.95
PROBED = 0.95


INFO = "info"  # ``holds`` of a row reported with no bound: ``bound`` and ``passed`` are None, it never fails


def check_row(name: str, value: Any, bound: Any, holds: str, detail: str) -> dict[str, Any]:
    """One check: ``value`` held to ``bound`` by ``holds`` (``>=``, ``<=``, ``<``, ``==``, ``in`` a closed
    ``[low, high]``); ``passed`` its verdict. ``holds`` = :data:`INFO`: a read-out reported beside the checks
    with no bound (``bound`` and ``passed`` None), because the construction guarantees nothing of it."""
    if holds == INFO:
        return {"name": name, "value": value, "bound": None, "holds": INFO, "passed": None, "detail": detail}
    passed = {">=": lambda: value >= bound, "<=": lambda: value <= bound, "<": lambda: value < bound,
              "==": lambda: value == bound, "in": lambda: bound[0] <= value <= bound[1]}[holds]()
    return {"name": name, "value": value, "bound": bound, "holds": holds, "passed": bool(passed), "detail": detail}


def ablation_verdict(removed: float, boundary: Sequence[float], L: int, heads: Sequence[Sequence[int]], prompts: int,
                     live_heads: Sequence[Sequence[int]]) -> dict[str, Any]:
    """``item-reading head ablated`` from its numbers: greedy accuracy with every live head of the item-reading
    block removed at once (``removed``; ``heads``: those (block, head)s), held to :data:`CHANCE_FACTOR`
    ``/ (L + 1)``; ``boundary``: per head of ``heads``, Figure 12's boundary-only ablation, right-first fraction
    (reported, not held to a bound). The detail says whether ``heads`` are every live head of the organism
    (``live_heads``): then nothing moves between positions and the bound holds by construction."""
    removed_heads = {tuple(map(int, h)) for h in heads}
    others = sorted({tuple(map(int, h)) for h in live_heads} - removed_heads)
    names = ", ".join(f"{b}.{h}" for b, h in sorted(removed_heads))
    cut = ("every live head: nothing moves between positions, so every prompt gets one answer (by construction)"
           if not others else f"live heads {', '.join(f'{b}.{h}' for b, h in others)} of other blocks left")
    shown = ", ".join(f"{b}.{h} {v:.3f}" for (b, h), v in zip(sorted(removed_heads), boundary, strict=True))
    return check_row("item-reading head ablated", float(removed), CHANCE_FACTOR / (int(L) + 1), "<=",
                     f"greedy accuracy with heads {names} (every live head of the item-reading block) removed, "
                     f"{prompts} held-out prompts of counts 0..{L}, chance {1 / (int(L) + 1):.3f}; {cut}; each "
                     f"head's boundary output mean-ablated alone instead (Figure 12): right count ranked first "
                     f"on {shown}")


def live_blocks(live_heads) -> tuple[int, int]:
    """(first, last) block holding a live head."""
    blocks = [int(b) for b, _ in live_heads]
    return min(blocks), max(blocks)


def position_verdicts(result, live_heads, item_block: int | None = None) -> list[dict[str, Any]]:
    """``position patching: flipped item before`` / ``boundary before`` / ``boundary after`` from a Figure 11
    ``result`` (:class:`~countlens.llm.positions.experiment.PositionPatchingResult`; its ``summary``: per
    location the mean normalised LD of each position group): the flipped item's smallest mean at the locations
    ``<= b0``, the boundary's largest there, and the boundary's smallest at the locations ``> b1`` (``b0``,
    ``b1``: the first and last block holding a live head; location ``i`` is the residual after ``i`` blocks).
    A location group with no normalised pair counts as 0 (the flipped item) or 1 (the boundary before): a
    check cannot pass on missing numbers."""
    b0, b1 = live_blocks(live_heads)
    before = [r for r in result.summary if int(r["index"]) <= b0]
    after = [r for r in result.summary if int(r["index"]) > b1]
    flipped = min((0.0 if r["flipped"] is None else float(r["flipped"]) for r in before), default=0.0)
    leak = max((1.0 if r["boundary"] is None else float(r["boundary"]) for r in before), default=1.0)
    moved = min((0.0 if r["boundary"] is None else float(r["boundary"]) for r in after), default=0.0)
    pairs = sum(p.normalised for p in result.pairs)
    where = (f"{pairs} normalised pairs (last target flipped); first/last live block {b0}/{b1}"
             + ("" if item_block is None else f", item-reading head's block {item_block}"))

    def names(rows):
        return ", ".join(r["name"] for r in rows) or "none"
    return [check_row("position patching: flipped item before", flipped, KEPT, ">=",
                   f"smallest mean normalised LD at the flipped item at {names(before)}; {where}"),
            check_row("position patching: boundary before", leak, LEAK, "<=",
                   f"largest mean normalised LD at the boundary at {names(before)}; {where}"),
            check_row("position patching: boundary after", moved, KEPT, ">=",
                   f"smallest mean normalised LD at the boundary at {names(after)}; {where}")]


def attribution_verdicts(result, live_heads) -> list[dict[str, Any]]:
    """The attribution-patching checks from one Figure 15 run (:class:`~countlens.llm.attribution.
    experiment.AttributionResult`): AtP's estimate for every zeroed head is zero (its slice of the output
    projection is zero, so the gradient through it is exactly zero: at most :data:`DEAD` nats, absolute), and
    the heads AtP ranks first by mean |estimate| are exactly the live ones, as activation patching's are; the
    heads' Spearman ρ between the two is in the detail."""
    live = {tuple(h) for h in live_heads}
    heads = [c for c in result.cells if c["kind"] == "head"]
    dead = [abs(c["atp"]) for c in heads if (c["layer"], c["head"]) not in live]
    worst = max(dead) if dead else 0.0
    by_head: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for c in heads:
        by_head.setdefault((c["layer"], c["head"]), []).append((abs(c["atp"]), abs(c["act"])))
    means = {h: np.mean(v, axis=0) for h, v in by_head.items()}
    top_atp = {h for h in sorted(means, key=lambda h: -means[h][0])[:len(live)]}
    top_act = {h for h in sorted(means, key=lambda h: -means[h][1])[:len(live)]}
    rho = result.agreement.get("head", {}).get("spearman")
    fmt = ", ".join(f"{b}.{h}" for b, h in sorted(top_atp))
    return [check_row("AtP dead heads", worst, DEAD, "<=",
                   f"largest |AtP estimate| of a zeroed head over {len(dead)} head cells (nats)"),
            check_row("AtP live heads first", top_atp == live and top_act == live, True, "==",
                   f"AtP's first heads {fmt}; activation patching's "
                   f"{', '.join(f'{b}.{h}' for b, h in sorted(top_act))}; heads' Spearman rho "
                   + ("n/a" if rho is None else f"{rho:.3f}"))]


def steering_slope(result) -> float:
    """Least-squares slope of the mean expected-count change on Δ along ``mean-diff`` in a Figure 9b
    ``result`` (:class:`~countlens.llm.steering.experiment.SteeringResult`), counts per unit Δ; NaN with
    fewer than two finite points."""
    points = [(c["delta"], c["mean_expected_shift"]) for c in result.curves.get("mean-diff", [])
              if c["mean_expected_shift"] is not None and np.isfinite(c["mean_expected_shift"])]
    if len({d for d, _ in points}) < 2:
        return float("nan")
    x, y = np.array(points, dtype=np.float64).T
    return float(np.polyfit(x, y, 1)[0])


def steering_row(result) -> dict[str, Any]:
    """``steering slope`` of a Figure 9b ``result``: :func:`steering_slope`, reported with no bound
    (:data:`INFO`): the construction does not make the count linearly steerable at any location (organisms
    planted with live heads 1.0 and 1.2 only answer every held-out prompt right with slopes of -0.002 and 0.30
    after block 1, in two trainings), so no slope is a verdict on the read-out."""
    slope = steering_slope(result)
    deltas = [c["delta"] for c in result.curves.get("mean-diff", [])]
    return check_row("steering slope", slope, None, INFO,
                     f"expected count per unit delta along the mean difference at {result.location}, count units, "
                     f"deltas {', '.join(f'{d:g}' for d in deltas)}, counts "
                     f"{', '.join(map(str, result.config['counts']))}; no bound: the construction does not make "
                     "the count linearly steerable")


def interchange_verdict(agree: Sequence[bool], counted: Sequence[bool], location: str, live_heads
                        ) -> dict[str, Any]:
    """``interchange after the live heads``: per pair of Figure 9a patched at ``location`` (the residual after
    the last block holding a live head), whether the patched answer's first token is the source prompt's own
    greedy first token (``agree``; the fraction held to :data:`INTERCHANGED`), and whether it is the source
    count's first answer token (``counted``; reported). An empty ``agree`` fails: a check cannot pass on
    missing numbers."""
    value = float(np.mean(agree)) if len(agree) else 0.0
    right = float(np.mean(counted)) if len(counted) else 0.0
    _, b1 = live_blocks(live_heads)
    return check_row("interchange after the live heads", value, INTERCHANGED, ">=",
                     f"patched first answer token = the source prompt's own, {len(agree)} pairs with the boundary "
                     f"replaced at {location} (after the last live block {b1}); = the source count's first token "
                     f"on {right:.3f}")


__all__ = ["INFO", "check_row", "ablation_verdict", "live_blocks", "position_verdicts", "attribution_verdicts",
           "steering_slope", "steering_row", "interchange_verdict", "ACCURACY", "ZERO", "DEAD", "CHANCE_FACTOR",
           "KEPT", "LEAK", "INTERCHANGED", "PATCHED", "PROBED"]
