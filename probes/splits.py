"""The one split of a probe's rows into train / validation / test (docs/definitions.md §2, "Probes").

Rows are split IID *by row* with a permutation drawn from the split seed: validation and test get
``round(fraction · rows)`` rows each, training the rest. Every probe in countlens — the per-location probes
(Figure 7), the sweep (Figure 8), the comparison's probe norm and :class:`~countlens.probes.RidgePathProbe`'s
own validation split — draws its rows here. Rows that are not independent (the item rows of one prompt:
Figure 10) are split by group with :func:`split_groups`, which draws the same permutation over the groups.
"""

from __future__ import annotations

import numpy as np

from countlens.core.errors import ConfigError

DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)


def split_rows(n_rows: int, seed: int, fractions=DEFAULT_FRACTIONS,
               unit: str = "rows") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted train / validation / test row indices (each (rows_part,) int) of ``n_rows`` rows.

    ``fractions`` = (train, validation, test), >= 0 and summing to 1; train and validation must be > 0,
    a test fraction of 0 leaves no test rows (a fit-and-select split). A :class:`ConfigError` about
    ``fractions`` when they are not such fractions, or when a part would be too small for ``n_rows`` rows
    (training needs 2 rows, validation 1, a non-empty test 1); ``unit`` names what is split in that error.
    """
    f_train, f_val, f_test = (float(f) for f in fractions)
    shown = f"{f_train:g}/{f_val:g}/{f_test:g}"
    if min(f_train, f_val) <= 0 or f_test < 0 or abs(f_train + f_val + f_test - 1) > 1e-9:
        raise ConfigError("fractions", "{fractions} (train/validation/test) must be >= 0, train and validation "
                                       f"> 0, and sum to 1, got {shown}")
    n_val, n_test = int(round(f_val * n_rows)), int(round(f_test * n_rows))
    n_train = n_rows - n_val - n_test
    if n_train < 2 or n_val < 1 or (f_test > 0 and n_test < 1):
        need = int(np.ceil(max(2 / f_train, 1 / f_val, 1 / f_test if f_test > 0 else 0)))
        raise ConfigError("fractions", f"the data set has {n_rows} {unit}; a {shown} train/validation/test split "
                                       f"({{fractions}}) needs at least {need}; capture more prompts")
    order = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(order[n_val + n_test:]), np.sort(order[:n_val]), np.sort(order[n_val:n_val + n_test])


def split_groups(groups: np.ndarray, seed: int, fractions=DEFAULT_FRACTIONS,
                 unit: str = "prompts") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted train / validation / test row indices with every group whole in one part: the distinct values
    of ``groups`` (rows,) — e.g. each row's prompt id — are split by :func:`split_rows` (in ascending order
    of the value), and each row follows its group. The fractions are fractions of *groups*, so the parts'
    row counts follow the groups' sizes; the errors are :func:`split_rows`' (about ``fractions``), counting
    groups as ``unit``."""
    groups = np.asarray(groups)
    values, inverse = np.unique(groups, return_inverse=True)
    parts = split_rows(len(values), seed, fractions, unit)
    where = np.empty(len(values), dtype=np.int64)  # group -> part (0 train, 1 validation, 2 test)
    for k, part in enumerate(parts):
        where[part] = k
    row_part = where[inverse.reshape(-1)]
    return tuple(np.flatnonzero(row_part == k) for k in range(3))  # type: ignore[return-value]


__all__ = ["DEFAULT_FRACTIONS", "split_rows", "split_groups"]
