"""A capture's counts and activations as the probes read them: :func:`load_probe_data` → :class:`ProbeData`
(an items capture's boundary rows only; the running-count probes read every row,
:func:`countlens.probes.running.load_item_data`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from countlens.core.capture import Capture, CaptureMeta, open_capture
from countlens.core.errors import UsageError

# The capture columns Figure 7 reads of the model's answer as a distribution over the candidate counts.
DISTRIBUTION_READ = ("answer_expected", "answer_rank")


@dataclass
class ProbeData:
    """A capture's counts and activations. acts: (rows, n_locations, d) in the stored dtype."""

    acts_dir: str
    meta: CaptureMeta
    locations: list[str]
    n: np.ndarray  # (rows,)
    acts: np.ndarray  # (rows, n_locations, d)
    answer: np.ndarray | None = None  # (rows,) the model's parsed answer (NaN: unparsed), if captured
    expected: np.ndarray | None = None  # (rows,) Σ k p(k) over the candidate counts, if captured
    rank: np.ndarray | None = None  # (rows,) rank of the correct count among the candidates (1 = best), if captured

    def X(self, index: int) -> np.ndarray:
        """The activations at one location as float64: (rows, d)."""
        return np.asarray(self.acts[:, index, :], dtype=np.float64)

    def source(self) -> dict[str, Any]:
        """What a probe result records of the capture it was fitted on."""
        counts = np.unique(self.n).astype(int)
        return {"model": self.meta.model_id, "L": self.meta.L, "rows": int(len(self.n)),
                "d": int(self.acts.shape[2]), "n_locations": len(self.locations),
                "count_min": int(counts.min()), "count_max": int(counts.max()), "n_counts": int(len(counts))}


def load_probe_data(acts: str | os.PathLike | Capture) -> ProbeData:
    """A capture (LLM or toy; a folder or an opened :class:`~countlens.core.capture.Capture`) for probing,
    in its stored dtype — of an items capture its boundary rows only; :class:`UsageError` when it has no
    count column or holds NaN/inf activations."""
    capture = open_capture(acts)
    acts_dir = capture.folder
    if "n" not in capture.columns or "acts" not in capture.columns:
        raise UsageError(f"{acts_dir} has no 'n' (count) or 'acts' column; probes need a capture made by "
                         "`countlens llm capture` or `countlens probe toy-acts`")
    capture = capture.boundary()
    acts = capture.all_acts()  # (rows, n_locations, d)
    n = capture.counts().astype(np.float64)
    if acts.ndim != 3 or len(acts) != len(n):
        raise UsageError(f"{acts_dir}: acts has shape {acts.shape}; expected (rows, locations, d)")
    bad = ~np.isfinite(acts).all(axis=(0, 2))
    if bad.any():
        raise UsageError(f"{acts_dir}: activations hold NaN or inf at location(s) "
                         f"{', '.join(str(i) for i in np.flatnonzero(bad))}; recapture with --dtype float32")
    locations = list(capture.meta.locations or [str(i) for i in range(acts.shape[1])])
    answer = expected = rank = None
    ds = capture.rows
    if "answer" in ds.column_names:
        answer = np.array([np.nan if a is None else a for a in ds["answer"]], dtype=np.float64)
    if all(name in ds.column_names for name in DISTRIBUTION_READ):
        expected = np.array([np.nan if v is None else v for v in ds["answer_expected"]], dtype=np.float64)
        rank = np.array([np.nan if v is None else v for v in ds["answer_rank"]], dtype=np.float64)
    return ProbeData(str(acts_dir), capture.meta, locations, n, acts, answer, expected, rank)


__all__ = ["DISTRIBUTION_READ", "ProbeData", "load_probe_data"]
