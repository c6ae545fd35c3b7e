"""Count geometry of a representation: centroids, adjacent gaps, effective rank, PCA, endpoint angle
(docs/definitions.md §2, "Geometry").

Every function here is a pure function of arrays (no I/O). A "centroid set" is ``counts`` (k,) — the
sorted counts present — and centroids ``C`` (k, d): row ``j`` is the mean boundary vector over the
prompts (or toy pairs) whose count is ``counts[j]``.

Windows are inclusive count ranges ``(lo, hi)``. A window's mean gap is the mean of
``||c_{n+1} - c_n||`` over the adjacent pairs inside it (``n = lo .. hi-1``), so the default high window
91..100 needs counts up to 100 only; its effective rank is that of the window's ``hi - lo + 1`` centroids.
A window needs every count in it: a hole would silently turn an adjacent gap into a longer one. The windows
are config fields (``low``, ``high``, ``pca_counts``, ``arc_counts``); a window the data cannot fill is a
:class:`~countlens.core.errors.ConfigError` about its field.
"""

from __future__ import annotations

import numpy as np

from countlens.core.errors import ConfigError, UsageError

LOW_WINDOW = (1, 10)
HIGH_WINDOW = (91, 100)
# The paper's spans over every count; a config leaves them unset (None) to take them limited to the counts
# the data holds (:func:`window_within`).
PCA_COUNTS = (1, 100)
ARC_COUNTS = (1, 100)


def describe_counts(counts) -> str:
    """Counts as compact ranges, e.g. ``"0:30, 40, 50:60"`` (for error messages)."""
    counts = sorted(int(c) for c in counts)
    if not counts:
        return "none"
    parts, start, prev = [], counts[0], counts[0]
    for c in counts[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(str(start) if start == prev else f"{start}:{prev}")
        if c is not None:
            start = prev = c
    return ", ".join(parts)


def window_within(default: tuple[int, int], *counts: np.ndarray) -> tuple[int, int]:
    """The span ``default`` limited to the counts every one of ``counts`` (each (k,)) holds: what an unset
    ``pca_counts`` or ``arc_counts`` means."""
    lo = max([int(default[0])] + [int(np.min(c)) for c in counts])
    hi = min([int(default[1])] + [int(np.max(c)) for c in counts])
    return lo, hi


def window_rows(counts: np.ndarray, window: tuple[int, int], field: str | None = None) -> np.ndarray:
    """Row indices of the counts ``lo..hi`` in ``counts``. If any is missing or the window holds fewer than
    two counts: a :class:`ConfigError` about the config field ``field`` that holds the window, naming the
    counts present (a :class:`UsageError` about "window" without a field)."""
    lo, hi = int(window[0]), int(window[1])
    if hi <= lo:
        raise _window_error(field, f"{lo}:{hi} must span at least two counts (lo < hi)")
    counts = np.asarray(counts)
    lookup = {int(c): i for i, c in enumerate(counts)}
    missing = [c for c in range(lo, hi + 1) if c not in lookup]
    if missing:
        raise _window_error(field, f"{lo}:{hi} needs counts {describe_counts(missing)}, but the data set has "
                                   f"counts {describe_counts(counts)}; choose windows inside them")
    return np.array([lookup[c] for c in range(lo, hi + 1)])


def _window_error(field: str | None, text: str) -> UsageError:
    if field is None:
        return UsageError(f"window {text}")
    return ConfigError(field, "{" + field + "} " + text)


def grouped_sums(values: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 sums of ``values`` (rows, ...) per distinct key: ``keys`` (rows,) or (rows, k) integer.

    Returns the sorted distinct keys (g,) or (g, k), the sums (g, ...) and the group sizes (g,). One sorted
    pass (``np.add.reduceat``), far faster than ``np.add.at``; this is the one centroid routine.
    """
    values = np.asarray(values, dtype=np.float64)
    keys = np.asarray(keys)
    uniq, inverse = np.unique(keys, axis=0 if keys.ndim > 1 else None, return_inverse=True)
    inverse = inverse.reshape(-1)
    sizes = np.bincount(inverse, minlength=len(uniq))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    sums = np.add.reduceat(values[np.argsort(inverse, kind="stable")], starts, axis=0)
    return uniq, sums, sizes


def count_centroids(acts: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean of ``acts`` (rows, ...) per count ``n`` (rows,): returns ``counts`` (k,) and centroids (k, ...)."""
    counts, sums, sizes = grouped_sums(acts, n)
    return counts, sums / sizes.reshape((-1,) + (1,) * (sums.ndim - 1))


def adjacent_gaps(C: np.ndarray) -> np.ndarray:
    """``||c_{j+1} - c_j||`` for consecutive rows of ``C`` (k, d): shape (k-1,)."""
    C = np.asarray(C, dtype=np.float64)
    return np.linalg.norm(np.diff(C, axis=0), axis=-1)


def mean_gap(counts: np.ndarray, C: np.ndarray, window: tuple[int, int]) -> float:
    """Mean adjacent-centroid gap inside ``window`` (inclusive counts)."""
    rows = window_rows(counts, window)
    return float(adjacent_gaps(np.asarray(C)[rows]).mean())


def gap_ratio(counts: np.ndarray, C: np.ndarray, low=LOW_WINDOW, high=HIGH_WINDOW) -> float:
    """Mean adjacent-centroid gap in ``high`` over that in ``low`` (nan when the low gap is 0), for one
    centroid set ``C`` (k, d). Figure 5 draws its mean over per-seed centroid sets; the comparison takes it
    of the centroids pooled over seeds (:mod:`countlens.analysis.layerwise`)."""
    lo_gap, hi_gap = mean_gap(counts, C, low), mean_gap(counts, C, high)
    return hi_gap / lo_gap if lo_gap > 0 else float("nan")


def effective_rank(X: np.ndarray) -> float:
    """Roy & Vetterli (2007) effective rank of the rows of ``X`` (k, d), after mean-centring the rows.

    ``p_i = σ_i / Σσ`` over the singular values, ``erank = exp(-Σ p_i log p_i)``; between 1 and
    ``min(k - 1, d)`` for rows that are not all equal, and 0 when they are (no spread at all). Singular
    values below ``max(k, d) · eps · σ_max`` are round-off and count as zero.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"effective_rank expects a 2-D array (rows, d), got shape {X.shape}")
    sigma = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    if sigma.size == 0 or sigma[0] == 0:
        return 0.0
    sigma = sigma[sigma > max(X.shape) * np.finfo(np.float64).eps * sigma[0]]
    p = sigma / sigma.sum()
    return float(np.exp(-np.sum(p * np.log(p))))


def erank_ratio(counts: np.ndarray, C: np.ndarray, low=LOW_WINDOW, high=HIGH_WINDOW) -> float:
    """Figure 5's red line: effective rank of the ``high`` window's centroids over the ``low`` window's."""
    C = np.asarray(C)
    lo_rank = effective_rank(C[window_rows(counts, low)])
    hi_rank = effective_rank(C[window_rows(counts, high)])
    return hi_rank / lo_rank if lo_rank > 0 else float("nan")


def pca_2d(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Project the mean-centred rows of ``C`` (k, d) on their first two principal axes.

    Returns coordinates (k, 2) and the explained-variance ratio of the two axes (2,). Each principal axis
    is signed so that the last row has a non-negative coordinate (PCA's sign is arbitrary; this makes
    reruns and panels comparable).
    """
    X = np.asarray(C, dtype=np.float64)
    X = X - X.mean(axis=0)
    # Eigendecomposition of the smaller Gram matrix instead of an SVD of the (k, d) matrix: the same top
    # components, without LAPACK's slow SVD of a wide matrix (BENCHMARKS.md).
    if X.shape[0] <= X.shape[1]:
        eig, vecs = np.linalg.eigh(X @ X.T)  # ascending
        top = np.argsort(eig)[::-1][:2]
        coords_k = vecs[:, top] * np.sqrt(np.clip(eig[top], 0.0, None))
    else:
        eig, vecs = np.linalg.eigh(X.T @ X)
        top = np.argsort(eig)[::-1][:2]
        coords_k = X @ vecs[:, top]
    k = len(top)
    coords = np.zeros((X.shape[0], 2))
    coords[:, :k] = coords_k
    coords *= np.where(coords[-1] < 0, -1.0, 1.0)
    eig = np.clip(eig, 0.0, None)
    total = float(np.sum(eig))
    explained = np.zeros(2)
    if total > 0:
        explained[:k] = eig[top] / total
    return coords, explained


def count_order(C: np.ndarray, counts: np.ndarray) -> float:
    """How well the first principal axis orders the counts: ``|Spearman ρ|`` between the rows' PC1
    coordinates (:func:`pca_2d` of ``C`` (k, d)) and ``counts`` (k,); 1 when PC1 sorts the counts, about
    ``1/sqrt(k-1)`` for centroids that hold no count (nan for fewer than 3 rows or an all-equal PC1)."""
    counts = np.asarray(counts, dtype=np.float64)
    if len(counts) < 3:
        return float("nan")
    pc1 = pca_2d(C)[0][:, 0]
    if np.ptp(pc1) == 0:
        return float("nan")
    a = np.argsort(np.argsort(pc1, kind="stable"), kind="stable").astype(np.float64)  # ranks (k,)
    b = np.argsort(np.argsort(counts, kind="stable"), kind="stable").astype(np.float64)
    a, b = a - a.mean(), b - b.mean()
    return float(abs(a @ b) / np.sqrt((a @ a) * (b @ b)))


def turn_angle(C: np.ndarray) -> float:
    """Mean angle in degrees between successive centroid steps ``c_{j+1} - c_j`` and ``c_{j+2} - c_{j+1}``
    of ``C`` (k, d), k >= 3: near 0 along a smooth curve, 120 for centroids that are independent noise
    around one point (two steps sharing a noisy centroid have cosine -1/2), nan where a step is zero."""
    steps = np.diff(np.asarray(C, dtype=np.float64), axis=0)  # (k-1, d)
    norms = np.linalg.norm(steps, axis=1)
    if len(steps) < 2 or np.any(norms == 0):
        return float("nan")
    u = steps / norms[:, None]
    cos = np.clip(np.sum(u[:-1] * u[1:], axis=1), -1.0, 1.0)
    return float(np.degrees(np.arccos(cos)).mean())


def endpoint_angle(counts: np.ndarray, C: np.ndarray, span=ARC_COUNTS) -> float:
    """The *endpoint angle*: radians, seen from the origin, between the centroids of the first and last
    count of ``span`` (the comparison's ``arc_angle`` column); nan when either centroid is zero.

    The origin is the natural vantage point: the next operation on a boundary vector (a LayerNorm or
    RMSNorm, or the toy's post-LN) reads its direction, so this is how far apart that operation sees the
    smallest and largest counts. It is *not* Figure 2b's arc angle (:func:`countlens.toy.classification.arc_angle`:
    the largest pairwise angle among the letter-free ``o(n, 0)``, each minus its mean over dimensions as
    LayerNorm centres it): the two measure different things and can differ by orders of magnitude.
    """
    lo, hi = int(span[0]), int(span[1])
    rows = window_rows(counts, (lo, hi))
    a, b = np.asarray(C, dtype=np.float64)[rows[[0, -1]]]
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return float("nan")
    # Kahan's formula stays accurate at tiny angles, where arccos of the cosine loses every digit.
    ua, ub = a / na, b / nb
    return float(2.0 * np.arctan2(np.linalg.norm(ua - ub), np.linalg.norm(ua + ub)))


__all__ = [
    "LOW_WINDOW", "HIGH_WINDOW", "PCA_COUNTS", "ARC_COUNTS", "describe_counts", "window_within", "window_rows",
    "grouped_sums", "count_centroids", "adjacent_gaps", "mean_gap", "gap_ratio", "effective_rank", "erank_ratio",
    "pca_2d", "count_order", "turn_angle", "endpoint_angle",
]
