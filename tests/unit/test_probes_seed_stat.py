"""The one summary over split seeds of every probe table (:func:`countlens.probes.probe.seed_stat`)."""

from types import SimpleNamespace

import numpy as np

from countlens.probes.probe import LocationProbes, seed_stat
from countlens.probes.running import RunningCell


def fits(*values):
    return [SimpleNamespace(r2=v) for v in values]


def test_a_seed_without_a_value_is_left_out_in_both_probe_tables():
    """Regression: ``LocationProbes.stat`` averaged with ``mean`` (one seed without a value made the whole
    summary NaN) while ``RunningCell.stat`` used ``nanmean``, so the same fits gave two different tables."""
    some = fits(0.5, None, 0.75, float("nan"))
    want = (0.625, 0.5, 0.75)
    assert seed_stat(some, "r2") == want
    assert LocationProbes("embed", 0, some).stat("r2") == want
    assert RunningCell(0, "n", some).stat("r2") == want


def test_no_value_or_no_fit_is_nan_and_a_full_set_is_the_plain_mean():
    for empty in (fits(None, float("nan")), []):
        assert all(np.isnan(seed_stat(empty, "r2")))
        assert all(np.isnan(LocationProbes("embed", 0, empty).stat("r2")))
    values = [0.1, 0.4, 0.2]
    assert seed_stat(fits(*values), "r2") == (float(np.mean(values)), 0.1, 0.4)
