"""The count manifold in the tasks comparison (countlens.pipeline.tasks): each task's rows are its saved
manifold.json's own numbers (the margin recomputed here from the saved distances), a report without the
manifold stage still loads, and the CSV, the figure's panels and the page's spans carry the same numbers."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from tests.helpers.captures import write_capture
from tests.helpers.report_checks import check_report

# the two linear variants are one ray (a tie the margin must skip), the bare post-LN one an arc
VARIANTS = ("linear", "linear-preln-bare", "softmax-postln-bare")
N_LOC = 3  # embeddings and two blocks


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory):
    """A task's report folder holding a real manifold stage's result (``manifold/manifold.json``) of a
    synthetic capture, and the depth of each of its locations."""
    from countlens.analysis import ManifoldConfig, run_manifold
    from countlens.core.locations import location_names

    root = tmp_path_factory.mktemp("tasks-manifold")
    write_capture(root / "acts", counts=range(0, 9), seeds=(0, 1), reps=2, n_loc=N_LOC, d=6)
    result = run_manifold(ManifoldConfig(acts=str(root / "acts"), variants=VARIANTS, toy_d=4, window=2,
                                         n_shuffles=4))
    result.save(root / "task" / "manifold")
    depth = {name: i / (N_LOC - 1) for i, name in enumerate(location_names(N_LOC - 1))}
    return root / "task", depth


def _saved(folder) -> list[dict]:
    return json.loads((folder / "manifold" / "manifold.json").read_text())["per_location"]


def test_the_rows_are_the_saved_manifolds_numbers(task_folder, tmp_path):
    from countlens.core.locations import location_label
    from countlens.pipeline.tasks import manifold_rows

    folder, depth = task_folder
    rows = manifold_rows(folder, depth)
    saved = _saved(folder)
    assert len(rows) == len(saved) == N_LOC
    for row, loc in zip(rows, saved, strict=True):
        assert row["location"] == location_label(loc["name"]) and row["depth"] == depth[loc["name"]]
        for key in ("dims95", "nearest_toy", "nearest_ties", "shape_above_floor"):
            assert row[key] == loc[key], key
        assert row["procrustes"] == {k: float(v) for k, v in loc["procrustes"].items()}
        assert row["split_half_distance"] == float(loc["split_half_distance"])
        assert row["split_half_noise"] == float(loc["split_half_noise"])
        assert row["procrustes_nearest"] == float(loc["procrustes"][loc["nearest_toy"]])
        # the margin by hand: the smallest distance that is not (within the tie) the nearest's, minus the nearest's
        ds = sorted(float(v) for v in loc["procrustes"].values())
        runner = next(d for d in ds if d > ds[0] + 1e-9)
        assert row["procrustes_margin"] == pytest.approx(runner - ds[0], abs=1e-12)
        assert 0 <= row["procrustes_nearest"] <= 2 and row["procrustes_margin"] > 0
    # the two linear variants are one shape: named together wherever either is the nearest
    assert all({"linear", "linear-preln-bare"} <= set(r["nearest_ties"]) for r in rows
               if r["nearest_toy"] in ("linear", "linear-preln-bare"))
    assert manifold_rows(tmp_path, depth) == []  # a report whose manifold stage did not run


def _summary(task: str, manifold: list[dict]):
    from countlens.pipeline.tasks import TaskSummary

    return TaskSummary(task=task, report=f"{task}/index.html", n_blocks=N_LOC - 1, prompts=72, accuracy=None,
                       capacity=None, rank1_capacity=None, expected_mae=None, per_count=[], probe=[],
                       best_probe={"location": "embeddings", "test_rounded_acc": 0.5, "r2": 0.25},
                       manifold=manifold)


@pytest.fixture(scope="module")
def compared(task_folder, tmp_path_factory):
    """(folder, TasksResult read back) of two tasks: one with the manifold, one from a report without it."""
    from countlens.pipeline.tasks import TasksResult, manifold_rows

    folder, depth = task_folder
    out = tmp_path_factory.mktemp("compared")
    TasksResult(model="synthetic", preset="test",
                tasks=[_summary("lists", manifold_rows(folder, depth)), _summary("repeat", [])]).save(out)
    return out, TasksResult.read(out)


def test_tasks_json_and_csv_hold_the_manifolds_numbers(task_folder, compared):
    from countlens.pipeline.tasks import MANIFOLD_CSV, TasksResult

    folder, _ = task_folder
    out, result = compared
    saved = _saved(folder)
    rows = result.tasks[0].manifold
    assert [r["dims95"] for r in rows] == [loc["dims95"] for loc in saved]
    assert [r["procrustes_nearest"] for r in rows] == [loc["procrustes"][loc["nearest_toy"]] for loc in saved]
    assert result.tasks[1].manifold == []
    data = json.loads((out / "tasks.json").read_text())  # an older tasks.json, before the manifold: it loads
    for t in data["tasks"]:
        del t["manifold"]
    assert [t.manifold for t in TasksResult.from_dict(data).tasks] == [[], []]
    with open(out / "tasks.csv", newline="") as f:
        lines = [r for r in csv.DictReader(f) if r["what"].startswith("manifold_")]
    assert len(lines) == len(MANIFOLD_CSV) * N_LOC and {r["task"] for r in lines} == {"lists"}
    for r in lines:
        loc = next(x for x in rows if math.isclose(x["depth"], float(r["x"])))
        want = loc[r["what"].removeprefix("manifold_")]
        assert r["value"] == str(want) or float(r["value"]) == pytest.approx(want), r


def test_the_figure_plots_each_tasks_manifold(compared):
    import dataclasses

    import matplotlib.pyplot as plt

    from countlens.pipeline.tasks import plot_tasks

    _, result = compared
    # a third task: the first's rows with the floor verdict turned over, so both markers are drawn
    flipped = [dict(r, shape_above_floor=not r["shape_above_floor"]) for r in result.tasks[0].manifold]
    result = dataclasses.replace(result, tasks=[*result.tasks, dataclasses.replace(result.tasks[0], task="flipped",
                                                                                   manifold=flipped)])
    fig = plot_tasks(result)
    try:
        shape = next(ax for ax in fig.axes if ax.get_ylabel().startswith("Procrustes distance"))
        dims = next(ax for ax in fig.axes if ax.get_ylabel().startswith("dims95"))
        for t in (result.tasks[0], result.tasks[2]):
            for ax, key in ((shape, "procrustes_nearest"), (dims, "dims95")):
                line = next(ln for ln in ax.get_lines() if ln.get_label() == t.task)
                assert np.allclose(line.get_xydata(), [[r["depth"], r[key]] for r in t.manifold])
                points = [ln for ln in ax.get_lines() if ln.get_label().startswith("_") and len(ln.get_xdata()) == 1
                          and ln.get_color() == line.get_color()]
                assert [tuple(ln.get_xydata()[0]) for ln in points] == [(r["depth"], r[key]) for r in t.manifold]
                filled = [not (isinstance(ln.get_markerfacecolor(), str) and ln.get_markerfacecolor() == "none")
                          for ln in points]
                assert filled == [r["shape_above_floor"] for r in t.manifold]
        assert not [ln for ln in shape.get_lines() if ln.get_label() == "repeat" and len(ln.get_xdata())]
        assert any(t.get_text() == "nearest: linear" for t in shape.get_legend().get_texts())
    finally:
        plt.close(fig)


def test_the_page_shows_the_manifold_table_from_tasks_json(compared):
    from countlens.pipeline.tasks import render_tasks_page

    out, result = compared
    text = render_tasks_page(out)
    parser = check_report(out, text)  # every number a span equal to tasks.json's value
    keys = {tuple(k) for _, k, _ in parser.values}
    for j in range(N_LOC):
        for key in ("dims95", "procrustes_nearest", "procrustes_margin", "shape_above_floor"):
            assert ("tasks", 0, "manifold", j, key) in keys
    margins = [r["procrustes_margin"] for r in result.tasks[0].manifold]
    low = ("tasks", 0, "manifold", int(np.argmin(margins)), "procrustes_margin")
    assert low in keys and "runner-up's margin" in text and "a shape is not a cause" in text
    assert not any(k[:2] == ("tasks", 1) and "manifold" in k for k in keys)


def test_the_reports_tasks_carry_each_tasks_own_manifold(test_preset_report):
    """On ``reproduce --preset test --tasks ...`` (the session's report): each task's manifold rows in
    tasks.json equal the manifold.json its own report saved, location by location."""
    from countlens.core.locations import location_names
    from countlens.pipeline.tasks import TASKS_DIR, TASKS_FILE

    out, code = test_preset_report
    assert code == 0
    tasks = json.loads((out / TASKS_DIR / TASKS_FILE).read_text())["tasks"]
    assert len(tasks) == 3
    for t in tasks:
        folder = (out / TASKS_DIR / t["report"]).parent
        saved = _saved(folder)
        assert [r["location"] for r in t["manifold"]] and len(t["manifold"]) == len(saved)
        for row, loc in zip(t["manifold"], saved, strict=True):
            assert (row["dims95"], row["nearest_toy"], row["shape_above_floor"]) == (
                loc["dims95"], loc["nearest_toy"], loc["shape_above_floor"])
            assert row["procrustes"] == loc["procrustes"]  # both as the files hold them ("nan" a string)
            best = loc["nearest_toy"]  # none where no variant's distance is finite (a curve of one point)
            assert row["procrustes_nearest"] == (None if best is None else loc["procrustes"][best])
            assert row["nearest_ties"] == loc["nearest_ties"]
            names = location_names(t["n_blocks"])
            assert row["depth"] == pytest.approx(names.index(loc["name"]) / t["n_blocks"])
