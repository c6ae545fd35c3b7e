"""Toy figures as a reader sees them: legends that hide no data, titles that say what was run, mathtext labels."""

import matplotlib

matplotlib.use("Agg")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from countlens.core.args import OneLineParser  # noqa: E402
from countlens.toy import cli  # noqa: E402
from countlens.toy.figures import figure4_caption, plot_figure2, plot_figure3, plot_figure4  # noqa: E402


def _figure2_result():
    """Figure 2's JSON at the quick sizes, with the trained norms the report showed (3.5 -> 9.5 -> 15)."""
    Ls = [10, 20, 50]
    runs = []
    # points in every corner of panel (a), so no legend fits inside the axes without covering one
    for L, reg, b0, cls, c in zip(Ls, (6.0, 11.0, 26.0), (1e-3, 5.0, 40.0), (3.5, 9.5, 15.0), (40.0, 1e-3, 3.0),
                                  strict=True):
        runs.append({"L": L, "readout": "regression", "seed": 0, "passed": True, "readout_norm": reg,
                     "bias_norm": b0, "arc_angle": 2e-4 * L})
        runs.append({"L": L, "readout": "classification", "seed": 0, "passed": True, "readout_norm": cls,
                     "bias_norm": c, "arc_angle": 1.7, "min_gap": list(np.geomspace(1e-2, 1e-4, L + 1))})
    cons = {"L": Ls, "max_norm": [1.0] * 3, "readout_norm": [1.0] * 3, "bias_norm": [0.0] * 3,
            "arc_angle": [1.2, 1.3, 1.4], "min_gap": [list(np.full(L + 1, 1.0 / L**2)) for L in Ls],
            "passed": [True] * 3}
    lmax = {v: {"B": [10.0, 30.0, 100.0], "l_max": [lm, 3 * lm, 10 * lm], "attained": [10, 20, 50],
                "attained_next_failing": [20, 50, None]}
            for v, lm in (("softmax", 19), ("softmax-postln-bare", 12), ("softmax-postln-learned", 60))}
    return {"variant": "softmax-postln-learned", "d": 16, "Ls": Ls, "runs": runs, "construction": cons,
            "storage": [], "lmax": lmax, "regression_b_min": [5.0, 10.0, 25.0]}


def _data_points(fig):
    """Every plotted point of every axes, and 20 points along each drawn line segment, in display
    coordinates: (N, 2)."""
    pts = []
    for ax in fig.axes:
        for coll in ax.collections:
            offsets = np.asarray(coll.get_offsets(), dtype=float)
            if len(offsets):
                pts.append(ax.transData.transform(offsets))
        for line in ax.get_lines():
            xy = np.column_stack([np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)])
            if len(xy):
                xy = ax.transData.transform(xy)
                t = np.linspace(0, 1, 20)[:, None, None]
                pts.append(xy)
                pts.append((xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2))
    return np.vstack(pts)


def test_figure2_legends_hide_no_data_point():
    fig = plot_figure2(_figure2_result())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    points = _data_points(fig)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 4
    for legend in legends:
        box = legend.get_window_extent(renderer)
        inside = [(x, y) for x, y in points if box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1]
        assert not inside, f"legend {box} covers {inside[:3]}"


def test_figure2_says_which_norms_are_trained_and_which_constructed():
    fig = plot_figure2(_figure2_result())
    title = fig._suptitle.get_text()
    assert "trained classifier's class vectors grow" in title and "construction's vectors stay bounded" in title
    labels = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    assert any(t.startswith("trained classification") for t in labels)
    assert any(t.startswith("classifier construction") for t in labels)


def _dynamics(figure, L, config):
    log = [{"step": s, "loss": 1.0 / (s + 1), "test_exact_accuracy": min(1.0, s / 10), "full_domain_worst_error": 1.0,
            "max_norm": 2.0 + s, "log_score_scale": 1.0, "spacing_ratio": 0.5} for s in range(0, 11, 5)]
    runs = [{"label": "full-batch Adam", "optimizer": "adam", "steps_run": 10, "log": log},
            {"label": "mini-batch Adam (1024)", "optimizer": "adam-minibatch", "steps_run": 10, "log": log}]
    return {"figure": figure, "variant": "softmax", "d": 16, "L": L, "runs": runs, "param_rate": 1.0,
            "score_rate": 2.0, "provenance": {"config": config}}


def test_figure4_title_states_its_L_and_why_update_counts_differ():
    quick = _dynamics("4", 100, {"steps": 1000, "minibatch_steps": 2000, "batch_size": 1024})
    text = figure4_caption(quick)
    assert "$L$ = 100 (reduced from the paper's 250 by the quick preset)" in text
    assert "1,000 updates" in text and "2,000" in text and "more updates, as in the paper" in text
    assert plot_figure4(quick)._suptitle.get_text() == text
    full = figure4_caption(_dynamics("4", 250, {"steps": 20000, "minibatch_steps": 60000, "batch_size": 1024}))
    assert "$L$ = 250" in full and "reduced" not in full


@pytest.mark.parametrize("plot, result", [
    (plot_figure2, _figure2_result()),
    (plot_figure3, _dynamics("3", 50, {})),
    (plot_figure4, _dynamics("4", 100, {})),
])
def test_axis_labels_write_powers_and_subscripts_in_mathtext(plot, result):
    fig = plot(result)
    labels = [a.get_xlabel() for a in fig.axes] + [a.get_ylabel() for a in fig.axes]
    for text in labels:
        raw = text.replace("$", "")
        if any(mark in raw for mark in ("^", "_")):
            assert text.count("$") >= 2, text
    if plot is plot_figure3:
        assert "$L^{1}$" in fig.axes[1].get_ylabel() and "$a / L^{2}$" in fig.axes[2].get_ylabel()


def _toy_parsers():
    root = OneLineParser(prog="countlens")
    cli.register(root.add_subparsers(dest="command", parser_class=OneLineParser))
    toy = root._subparsers._group_actions[0].choices["toy"]
    return toy, toy._subparsers._group_actions[0].choices


def test_every_toy_option_has_help_and_shows_its_default():
    toy, commands = _toy_parsers()
    assert toy.description and len(commands) == 11
    for name, parser in commands.items():
        assert parser.description, name
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"toy {name} {action.option_strings}"
            shown = ("(default" in action.help or action.required or action.default in (None, False)
                     or action.nargs == 0)
            # HelpFormatter appends "(default: X)" for every other default, except 0 (it reads 0 as False)
            assert shown or action.default != 0, f"toy {name} {action.option_strings}"
            if action.default is None and not action.required and action.nargs != 0:
                assert "(default" in action.help, f"toy {name} {action.option_strings} hides its default"


def test_construct_variant_help_lists_the_seven_variants():
    _, commands = _toy_parsers()
    text = commands["construct"].format_help()
    assert "SPEC" not in text
    for v in ("linear", "linear-preln-bare", "softmax", "softmax-postln-bare", "softmax-postln-learned",
              "softmax-preln-learned", "softmax-preln-bare"):
        assert v in text
