"""The model's own answers beside the probes (Figure 7's behaviour panel): greedy accuracy, the answer as a
distribution over the counts (expected count, rank of the correct one), per count bin, and the counting
capacity they give (docs/definitions.md §2.9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from countlens.probes.metrics import (
    binned_accuracy,
)

BEHAVIOUR_DEFINITION = "exact accuracy of the model's greedy answer, parsed by countlens.llm.answers"

# The share a count's prompts must reach for the model to count it (greedy accuracy, rank-1 rate).
CAPACITY_THRESHOLD = 0.5

CAPACITY_DEFINITION = ("the largest captured count n such that, at every captured count from the smallest "
                       "count >= 1 up to n, at least half the prompts are answered right (greedy: the parsed "
                       "answer equals n; rank 1: the correct count is the most likely candidate); null when "
                       "the smallest count already fails")


@dataclass
class Behaviour:
    """The model's own zero-shot answers on every row of the capture: exact accuracy (parsed answer ==
    count, an unparsed answer counting as wrong) overall and per count range (the probes' bins), and the
    share of answers that parse.

    With the answer as a distribution over the candidate counts in the capture (``answer_expected``,
    ``answer_rank``; ``distribution`` true), also per bin and per count: ``mean_count`` (mean n),
    ``expected`` (mean expected count Σ k p(k)), ``rank`` (the correct count's mean rank, 1 = most likely)
    and ``rank1`` (share of prompts whose correct count is the most likely), and overall ``rank1`` and
    ``expected_mae`` (mean |expected count − n|). These stay informative where the greedy answer is the same
    number for every prompt. ``capacity`` and ``rank1_capacity``: the model's counting capacity
    (:data:`CAPACITY_DEFINITION`, threshold :data:`CAPACITY_THRESHOLD`) from the greedy accuracy and from the
    rank-1 rate per count, both over the captured counts from ``capacity_from`` on."""

    accuracy: float
    parsed: float
    rows: int
    binned: list[dict[str, Any]]  # lo, hi, accuracy (None: no row), rows [, mean_count, expected, rank, rank1]
    definition: str = BEHAVIOUR_DEFINITION
    per_count: list[dict[str, Any]] | None = None  # n, rows, accuracy [, mean_count, expected, rank, rank1]
    capacity_from: int | None = None  # the smallest captured count >= 1 (None: no such count)
    capacity: int | None = None
    distribution: bool = False
    rank1: float | None = None
    expected_mae: float | None = None
    rank1_capacity: int | None = None
    capacity_definition: str = CAPACITY_DEFINITION


def behaviour_accuracy(n: np.ndarray, answer: np.ndarray | None, bins, *, expected: np.ndarray | None = None,
                       rank: np.ndarray | None = None) -> Behaviour | None:
    """The model's zero-shot exact accuracy (parsed answer == count; NaN = unparsed = wrong) on every row,
    overall, per count range of ``bins`` and per count, with its counting capacity; with ``expected`` and
    ``rank`` (rows,) — the answer distribution's expected count and the correct count's rank, NaN or a rank
    < 1 where a row has none — also their means per bin and per count and the rank-1 capacity
    (:class:`Behaviour`). ``None`` without answers."""
    if answer is None:
        return None
    n = np.asarray(n, dtype=np.float64)
    hit = np.asarray(answer, dtype=np.float64) == n
    binned = binned_accuracy(n, np.where(np.isfinite(answer), answer, -1.0), bins)
    counts = np.unique(n)
    per_count = [{"n": int(k), "rows": int(np.sum(n == k)), "accuracy": float(hit[n == k].mean())} for k in counts]
    start = counts[counts >= 1]
    out = Behaviour(accuracy=float(hit.mean()), parsed=float(np.mean(np.isfinite(answer))), rows=int(len(n)),
                    binned=binned, per_count=per_count, capacity_from=int(start[0]) if len(start) else None,
                    capacity=counting_capacity(counts, [c["accuracy"] for c in per_count]))
    if expected is None or rank is None:
        return out
    expected = np.asarray(expected, dtype=np.float64)
    rank = np.asarray(rank, dtype=np.float64)
    rank = np.where(rank >= 1, rank, np.nan)  # a row whose correct count is no candidate has no rank
    rank1 = np.where(np.isfinite(rank), (rank == 1).astype(np.float64), np.nan)
    for entry, inside in [*((b, (n >= b["lo"]) & (n <= b["hi"])) for b in binned),
                          *((c, n == c["n"]) for c in per_count)]:
        entry.update(mean_count=_mean(n[inside]), expected=_mean(expected[inside]), rank=_mean(rank[inside]),
                     rank1=_mean(rank1[inside]))
    out.distribution = True
    out.rank1 = _mean(rank1)
    out.expected_mae = _mean(np.abs(expected - n))
    out.rank1_capacity = counting_capacity(counts, [c["rank1"] for c in per_count])
    return out


def counting_capacity(counts, rates) -> int | None:
    """The counting capacity (:data:`CAPACITY_DEFINITION`) from each captured count's rate of right answers:
    the last count before the first of ``counts`` >= 1 (ascending) whose rate is below
    :data:`CAPACITY_THRESHOLD` (a missing rate, None or NaN, fails); ``None`` when the first already fails or
    no count is >= 1."""
    capacity = None
    for k, rate in zip(counts, rates, strict=True):
        if k < 1:
            continue
        if rate is None or not np.isfinite(rate) or rate < CAPACITY_THRESHOLD:
            break
        capacity = int(k)
    return capacity


def _mean(values: np.ndarray) -> float | None:
    """The mean of the finite values, None when there is none."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else None


__all__ = ["BEHAVIOUR_DEFINITION", "CAPACITY_THRESHOLD", "CAPACITY_DEFINITION", "Behaviour", "behaviour_accuracy",
           "counting_capacity"]
