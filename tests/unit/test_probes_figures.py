"""Probe figures: labels say what is drawn (location labels, protocol, the relative ridge coefficient)."""

import matplotlib
import numpy as np

from countlens.core.capture import CaptureMeta
from countlens.probes.data import ProbeData
from countlens.probes.probe import ProbeConfig, run_probes
from countlens.probes.sweep import SweepConfig, run_sweep

matplotlib.use("Agg")

NAMES = ["embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def _data(rows=200, d=6):
    rng = np.random.default_rng(0)
    n = rng.integers(0, 30, size=rows).astype(float)
    acts = np.stack([rng.normal(size=(rows, d)), np.outer(n, rng.normal(size=d)) + rng.normal(size=(rows, d)),
                     np.outer(n, rng.normal(size=d))], axis=1)
    return ProbeData("memory", CaptureMeta(), list(NAMES), n, acts)


def test_figure7_names_locations_by_label_and_the_protocol():
    from countlens.probes.figures import plot_binned_accuracy, plot_layerwise

    result = run_probes(ProbeConfig("memory", alphas=(1e-3, 1.0, 1e3), seeds=(0,)), _data())
    ax = plot_binned_accuracy(result).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["after block 2"]
    assert "selected on validation" in ax.get_title() and "scored on test" in ax.get_title()
    assert "test" in ax.get_ylabel()
    assert "validation" in plot_layerwise(result)._suptitle.get_text()


def test_figure8_defines_the_relative_ridge_coefficient_in_mathtext():
    from countlens.probes.figures import plot_norm_sweep

    result = run_sweep(SweepConfig("memory", alphas=(1e-3, 1.0, 1e3), seeds=(0, 1)), _data())
    fig = plot_norm_sweep(result)
    fig.canvas.draw()
    colorbar = fig.axes[1].get_ylabel()
    assert "relative ridge coefficient" in colorbar and r"\alpha_{\mathrm{rel}} =" in colorbar
    ax = fig.axes[0]
    assert ax.get_xlabel().count("$") >= 2 and "after block 1" in ax.get_title()
