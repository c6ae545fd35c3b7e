"""Tasks side by side: one model's analyses per counting task, and one comparison of them.

``countlens reproduce --tasks T1,T2`` runs, for each task beyond the report's own (``--task``, ``lists`` by
default), the model's capture (with its answers), probes, geometry, count manifold and lenses
(:func:`task_stages`; the quick preset trades sizes, :data:`EXTRA_TASK_SIZES`) into ``OUT/tasks/<task>/`` — a
report of its own, resumable like any — with the model loaded once for all of them; ``countlens study --tasks`` does the same for every model. Then :class:`TasksResult`
(``tasks.json``, ``tasks.csv``) holds per task, read back from those stages' saved results:

- the model's own answers per count (greedy accuracy, the expected count over the candidate counts, the
  correct count's rank-1 rate) and the counting capacity they give (docs/definitions.md §2.9);
- the ridge probes per location (test R² and test rounded accuracy, validation-selected α; Figure 7);
- the correct count's mean rank per location under the logit and the tuned lens, and under the model's own
  read-out (Figure 13);
- the count manifold per location (docs/definitions.md §2.17), copied from the task's saved
  :class:`~countlens.analysis.ManifoldResult`: ``dims95``, the ``nearest_toy`` variant (and its ``nearest_ties``),
  every variant's ``procrustes`` distance, ``shape_above_floor`` with the ``split_half_distance`` and
  ``split_half_noise`` behind it; and the one number this comparison adds, ``procrustes_margin`` (the runner-up
  variant's distance minus the nearest's, tied variants left out: how weakly the nearest is named).

Its figure (``tasks.png``/``.pdf``) puts the tasks on the same axes — accuracy and expected count against
the count (where the accuracy collapses: the counting capacity), probe R², the lens rank, the nearest toy
variant's Procrustes distance and the manifold's dims95 against relative depth — so the effect of the format
(a separator, say) is visible at a glance; the report shows it with tables whose every number is read from
``tasks.json``.
"""

from __future__ import annotations

import html
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from countlens.core.errors import ConfigError, literal
from countlens.core.io import save_figure, write_text_atomic
from countlens.core.locations import location_label, location_names
from countlens.core.report import Page, table
from countlens.core.results import Result
from countlens.llm import CaptureResult, LensResult
from countlens.llm.tasks import TASKS, parse_task
from countlens.pipeline.experiments import SOURCE, by_name, study_stages
from countlens.probes.probe import ProbeResult

TASKS_DIR = "tasks"  # OUT/tasks/<task folder>/: one report per extra task
TASKS_FILE = "tasks.json"
TASKS_CSV = "tasks.csv"
FIGURE_STEM = "tasks"
LENS_STAGE = "lens"
MANIFOLD_STAGE = "manifold"
# the manifold read-outs tasks.csv lists per task and location (``manifold_<key>``), each as the task's
# manifold.json holds it; procrustes_nearest: the nearest variant's distance, procrustes_margin: manifold_rows
MANIFOLD_CSV = ("dims95", "nearest_toy", "procrustes_nearest", "procrustes_margin", "shape_above_floor")


def parse_tasks(text: str) -> tuple[str, ...]:
    """``--tasks``: tasks separated by commas, each ``NAME`` or ``NAME:option=value,...`` — a part that does
    not start with a task's name continues the options of the task before it
    (``lists,repeat:separator=comma,word=b,letters`` is three tasks). Each is checked
    (:func:`~countlens.llm.tasks.parse_task`) and written as ``--task`` writes it; a task named twice is
    refused (:class:`ConfigError` naming ``tasks``)."""
    groups: list[str] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        if part.partition(":")[0] in TASKS or not groups:
            groups.append(part)
        else:
            groups[-1] += "," + part
    if not groups:
        raise ConfigError("tasks", "{tasks} must name at least one task")
    tasks = []
    for text_ in groups:
        try:
            tasks.append(parse_task(text_).text)
        except ConfigError as exc:
            raise ConfigError("tasks", "{tasks}: " + literal(str(exc))) from None
    twice = sorted({t for t in tasks if tasks.count(t) > 1})
    if twice:
        raise ConfigError("tasks", f"{{tasks}} names {literal(', '.join(twice))} more than once")
    return tuple(tasks)


def task_folder_name(task: str) -> str:
    """A folder name for the task ``task`` (``repeat:separator=comma`` -> ``repeat-separator-comma``)."""
    name = re.sub(r"[^A-Za-z0-9._]+", "-", task).strip("-.")
    return name or "task"


# Per preset, the sizes ``reproduce --tasks`` trades for each extra task: capture settings it sets where the
# command line did not, and stages it leaves out. quick (make demo): every other count (51 prompts, not 101: a
# task's capture is most of its cost) and no geometry, whose count windows need every count and which the
# comparison does not read. The report's own task keeps every count.
EXTRA_TASK_SIZES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "quick": ({"counts": list(range(0, 101, 2))}, ("geometry",))}


def task_stages(preset: str | None = None) -> list[str]:
    """The stages ``reproduce --tasks`` runs per extra task: the study's model stages that read the model
    (capture with answers, geometry, probes; not the toy construction and its comparison, the same for every
    task) and the lenses, less those :data:`EXTRA_TASK_SIZES` leaves out at ``preset``."""
    found, chosen = by_name(), [SOURCE]
    left_out = EXTRA_TASK_SIZES.get(preset or "", ({}, ()))[1]
    for name in [*study_stages("model"), LENS_STAGE]:
        reads = set(found[name].reads.values())
        if name != SOURCE and name not in left_out and reads and reads <= set(chosen):
            chosen.append(name)
    return chosen


def task_capture(preset: str, capture: dict[str, Any] | None, task: str) -> dict[str, Any]:
    """The capture settings of extra task ``task``: the command line's (``capture``), the task, and the
    sizes :data:`EXTRA_TASK_SIZES` trades at ``preset`` that the command line does not set."""
    sizes = EXTRA_TASK_SIZES.get(preset, ({}, ()))[0]
    return {**sizes, **(capture or {}), "task": task}


@dataclass
class TaskSummary:
    """One task's row of the comparison.

    ``per_count``: per captured count ``n`` the model's greedy ``accuracy``, ``expected`` count and
    ``rank1`` rate (None where the capture has no answer distribution). ``probe``: per location its
    ``location`` label, ``depth`` (location / number of blocks), test ``r2`` and ``test_rounded_acc``
    (seed means). ``lens``: per location the correct count's mean rank under the ``logit`` and the
    ``tuned`` lens (1 = first), empty where the lenses did not run; ``model_rank``: the same under the model's
    own read-out. ``best_probe``: the validation-selected location with its test rounded accuracy; ``best_lens``:
    the location where the logit lens ranks the correct count best. ``manifold``: per location of the task's
    saved count manifold (:func:`manifold_rows`; empty where its stage did not run) its ``location`` label,
    ``depth`` and the manifold's own read-outs."""

    task: str
    report: str
    n_blocks: int
    prompts: int
    accuracy: float | None
    capacity: int | None
    rank1_capacity: int | None
    expected_mae: float | None
    per_count: list[dict[str, Any]]
    probe: list[dict[str, Any]]
    best_probe: dict[str, Any]
    lens: list[dict[str, Any]] = field(default_factory=list)
    model_rank: float | None = None
    best_lens: dict[str, Any] | None = None
    manifold: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TasksResult(Result):
    """The tasks of one model side by side: ``model``, the size ``preset`` and one :class:`TaskSummary` per
    task, in the order asked (the report's own task first)."""

    FILE: ClassVar[str] = TASKS_FILE
    COMMAND: ClassVar[str] = "countlens reproduce --tasks"

    model: str
    preset: str
    tasks: list[TaskSummary]

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """``tasks.csv``: one row per task and curve point — ``task, what, x, value`` (``what``: accuracy,
        expected, rank1 against the count; probe_r2, probe_rounded_acc, logit_rank, tuned_rank and
        ``manifold_<key>`` for each key of :data:`MANIFOLD_CSV` against the relative depth)."""
        rows: list[list[Any]] = []
        for t in self.tasks:
            for r in t.per_count:
                rows += [[t.task, key, r["n"], r.get(key)] for key in ("accuracy", "expected", "rank1")]
            for r in t.probe:
                rows += [[t.task, "probe_r2", r["depth"], r["r2"]],
                         [t.task, "probe_rounded_acc", r["depth"], r["test_rounded_acc"]]]
            for r in t.lens:
                rows += [[t.task, "logit_rank", r["depth"], r["logit"]], [t.task, "tuned_rank", r["depth"], r["tuned"]]]
            for r in t.manifold:
                rows += [[t.task, f"manifold_{key}", r["depth"], r[key]] for key in MANIFOLD_CSV]
        return {TASKS_CSV: (["task", "what", "x", "value"], rows)}


def summarize_task(task: str, folder: Path, base: Path) -> TaskSummary:
    """A task's :class:`TaskSummary` from the capture, probe and lens results saved under ``folder`` (a
    report folder); ``report`` is its ``index.html`` relative to ``base``."""
    meta = CaptureResult.read(folder / "capture").meta
    n_blocks = int(meta.n_blocks)
    depth = {name: i / n_blocks for i, name in enumerate(location_names(n_blocks))}
    probes = ProbeResult.read(folder / "probe")
    behaviour = probes.behaviour
    per_count = [{"n": r["n"], "accuracy": r.get("accuracy"), "expected": r.get("expected"), "rank1": r.get("rank1")}
                 for r in (behaviour.per_count or [])] if behaviour else []
    probe = [{"location": location_label(loc.name), "depth": depth.get(loc.name, float("nan")),
              "r2": loc.stat("r2")[0], "test_rounded_acc": loc.stat("test_rounded_acc")[0]}
             for loc in probes.locations]
    best = probes.best_location()
    summary = TaskSummary(
        task=task, report=os.path.relpath(folder / "index.html", base), n_blocks=n_blocks,
        prompts=int(meta.n_prompts or (behaviour.rows if behaviour else 0)),
        accuracy=behaviour.accuracy if behaviour else None, capacity=behaviour.capacity if behaviour else None,
        rank1_capacity=behaviour.rank1_capacity if behaviour else None,
        expected_mae=behaviour.expected_mae if behaviour else None, per_count=per_count, probe=probe,
        best_probe={"location": location_label(best.name), "test_rounded_acc": best.stat("test_rounded_acc")[0],
                    "r2": best.stat("r2")[0]})
    lens_file = folder / LENS_STAGE / LensResult.FILE
    if lens_file.is_file():
        lens = LensResult.read(lens_file)
        summary.lens = [{"location": loc["label"], "depth": loc["index"] / n_blocks,
                         "logit": loc["logit"]["rank"], "tuned": loc["tuned"]["rank"]} for loc in lens.locations]
        summary.model_rank = lens.model_readout.get("rank")
        if summary.lens:
            summary.best_lens = min(summary.lens, key=lambda r: r["logit"])
    summary.manifold = manifold_rows(folder, depth)
    return summary


def manifold_rows(folder: Path, depth: dict[str, float]) -> list[dict[str, Any]]:
    """Per location of the count manifold saved under ``folder`` (``manifold/manifold.json``; ``[]`` where that
    stage did not run) its ``location`` label, relative ``depth`` (``depth``: location name -> location /
    blocks) and, as the manifold result holds them, ``dims95``, ``nearest_toy``, ``nearest_ties``, every
    variant's ``procrustes`` distance (0 = congruent, at most 2), ``shape_above_floor``, ``split_half_distance``
    and ``split_half_noise``; with ``procrustes_nearest`` = ``procrustes[nearest_toy]`` and
    ``procrustes_margin`` = the smallest distance of a variant outside ``nearest_ties`` minus
    ``procrustes_nearest`` (None where no such variant has a finite distance): how far the nearest is ahead."""
    from countlens.analysis import ManifoldResult

    if not (folder / MANIFOLD_STAGE / ManifoldResult.FILE).is_file():
        return []
    rows = []
    for r in ManifoldResult.read(folder / MANIFOLD_STAGE).per_location:
        best = r["nearest_toy"]
        ties = list(r["nearest_ties"]) if "nearest_ties" in r else [best] * (best is not None)
        distances = {k: float(v) for k, v in r["procrustes"].items()}  # a saved NaN is the string "nan"
        nearest = distances[best] if best is not None else None
        others = [v for k, v in distances.items() if k not in ties and math.isfinite(v)]
        rows.append({"location": location_label(r["name"]), "depth": depth.get(r["name"], float("nan")),
                     "dims95": r["dims95"], "nearest_toy": best, "nearest_ties": ties, "procrustes": distances,
                     "procrustes_nearest": nearest,
                     "procrustes_margin": min(others) - nearest if others and nearest is not None else None,
                     "shape_above_floor": bool(r["shape_above_floor"]),
                     "split_half_distance": float(r["split_half_distance"]),
                     "split_half_noise": float(r["split_half_noise"])})
    return rows


def compare_tasks(entries: list[tuple[str, Path]], folder: Path, model: str, preset: str) -> TasksResult:
    """The comparison of ``entries`` (task, its report folder), saved with its figure and page
    (``index.html``) into ``folder``; each task's report is linked relative to it."""
    folder = Path(folder)
    result = TasksResult(model=model, preset=preset,
                         tasks=[summarize_task(task, Path(f), folder) for task, f in entries])
    result.save(folder)
    save_figure(plot_tasks(result), folder / FIGURE_STEM)
    write_text_atomic(folder / "index.html", render_tasks_page(folder))
    return result


# ------------------------------------------------------------------------------------------ the figure


def plot_tasks(result: TasksResult):
    """Six panels, one colour per task: greedy accuracy and expected count against the count (the line
    y = n: a perfect counter), probe test R², the logit lens's correct-count rank (log scale), and the count
    manifold's nearest-toy Procrustes distance and dims95 (:func:`_plot_manifold`) against relative depth."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15.0, 7.5))
    (acc, exp, r2), (rank, shape, dims) = axes
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    top = 0
    for k, t in enumerate(result.tasks):
        c = colours[k % len(colours)]
        ns = [r["n"] for r in t.per_count]
        top = max([top, *ns])
        acc.plot(ns, [_nan(r["accuracy"]) for r in t.per_count], "-o", ms=2.5, color=c, label=t.task)
        exp.plot(ns, [_nan(r["expected"]) for r in t.per_count], "-", color=c, label=t.task)
        r2.plot([r["depth"] for r in t.probe], [r["r2"] for r in t.probe], "-o", ms=2.5, color=c, label=t.task)
        if t.lens:
            rank.plot([r["depth"] for r in t.lens], [r["logit"] for r in t.lens], "-o", ms=2.5, color=c,
                      label=t.task)
            rank.plot([r["depth"] for r in t.lens], [r["tuned"] for r in t.lens], "--", color=c)
    exp.plot([0, top], [0, top], color="0.6", lw=0.8, label="expected = n")
    acc.set(xlabel="count n", ylabel="greedy accuracy", title="the model's answers", ylim=(-0.03, 1.03))
    exp.set(xlabel="count n", ylabel="expected count over the candidates", title="the answer distribution")
    r2.set(xlabel="relative depth (location / blocks)", ylabel="probe test R²", title="ridge probes", xlim=(0, 1))
    rank.set(xlabel="relative depth (location / blocks)", ylabel="correct count's mean rank",
             title="lenses: logit solid, tuned dashed (1 = first)", xlim=(0, 1))
    rank.set_yscale("log")
    _plot_manifold(shape, dims, result, colours)
    for ax in (acc, exp, r2, rank):
        if ax.get_legend_handles_labels()[0]:  # no lens run: the rank panel has no lines to name
            ax.legend(fontsize=7)
    fig.suptitle(f"Tasks side by side: {result.model}")
    fig.tight_layout()
    return fig


MARKERS = "os^vD<>phX*"  # one marker per toy variant, in the order of the manifold's variants


def _plot_manifold(shape, dims, result: TasksResult, colours: list[str]) -> None:
    """The count manifold per task (colour) against relative depth: on ``shape`` the nearest toy variant's
    Procrustes distance (``procrustes_nearest``), on ``dims`` ``dims95``; each point's marker names its nearest
    variant, filled where the shape stands above its floor (``shape_above_floor``), hollow where not."""
    from countlens.toy import VARIANTS

    named = {}
    for k, t in enumerate(result.tasks):
        c = colours[k % len(colours)]
        x = [r["depth"] for r in t.manifold]
        shape.plot(x, [_nan(r["procrustes_nearest"]) for r in t.manifold], "-", color=c, lw=1, label=t.task)
        dims.plot(x, [r["dims95"] for r in t.manifold], "-", color=c, lw=1, label=t.task)
        for r in t.manifold:
            marker = MARKERS[VARIANTS.index(r["nearest_toy"]) % len(MARKERS)] if r["nearest_toy"] in VARIANTS else "."
            named[r["nearest_toy"]] = marker
            face = c if r["shape_above_floor"] else "none"
            shape.plot([r["depth"]], [_nan(r["procrustes_nearest"])], marker, color=c, mfc=face, ms=5)
            dims.plot([r["depth"]], [r["dims95"]], marker, color=c, mfc=face, ms=5)
    for name, marker in named.items():  # the legend of the markers: one grey entry per variant named
        shape.plot([], [], marker, color="0.4", mfc="none", ls="none",
                   label=f"nearest: {name or 'none (no finite distance)'}")
    shape.plot([], [], "o", color="0.4", ls="none", label="filled: shape above its floor")
    shape.set(xlabel="relative depth (location / blocks)", ylabel="Procrustes distance to the nearest toy",
              title="count manifold: nearest toy shape (0 = congruent)", xlim=(0, 1))
    dims.set(xlabel="relative depth (location / blocks)", ylabel="dims95 (components for 95 % variance)",
             title="count manifold: intrinsic dimension", xlim=(0, 1))
    for ax in (shape, dims):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)


def _nan(value: Any) -> float:
    return float("nan") if value is None else float(value)


# ------------------------------------------------------------------------------------------ the page


def tasks_section(page: Page, rel: str, prefix: str = "") -> None:
    """The comparison in ``page``: its figure (``prefix`` + ``tasks.png``) and one row per task, every number
    a span of ``rel`` (the ``tasks.json``); a task's name links its own report."""
    data = page.load(rel)
    if not data:
        return
    rows = []
    for i, t in enumerate(data["tasks"]):
        link = html.escape(prefix + t["report"])
        lens = (f"{page.v(rel, 'tasks', i, 'best_lens', 'location')}: {page.v(rel, 'tasks', i, 'best_lens', 'logit')}"
                if t.get("best_lens") else "—")
        rows.append([f'<a href="{link}">{page.v(rel, "tasks", i, "task")}</a>',
                     page.v_or_dash(rel, "tasks", i, "prompts"), page.v_or_dash(rel, "tasks", i, "accuracy"),
                     page.v_or_dash(rel, "tasks", i, "capacity"), page.v_or_dash(rel, "tasks", i, "rank1_capacity"),
                     page.v_or_dash(rel, "tasks", i, "expected_mae"),
                     f"{page.v(rel, 'tasks', i, 'best_probe', 'location')}: "
                     f"{page.v(rel, 'tasks', i, 'best_probe', 'test_rounded_acc')}",
                     lens, page.v_or_dash(rel, "tasks", i, "model_rank")])
    png = html.escape(prefix + FIGURE_STEM + ".png")
    page.add(f'<figure><a href="{png}"><img src="{png}" alt="tasks side by side" loading="lazy"></a>'
             f'<figcaption><a href="{png}">full-size PNG</a> · <a href="{html.escape(prefix + FIGURE_STEM)}.pdf">'
             "PDF</a></figcaption></figure>")
    page.add(table(["task", "prompts", "greedy accuracy", "capacity (greedy)", "capacity (rank one)",
                    "expected count's mean error", "best probe: test rounded accuracy",
                    "best logit lens: correct count's rank", "model's own rank"], rows, left=(0, 6, 7)))
    page.caption("One row per task, each linking its own report. Greedy accuracy: the share of prompts the model "
                 "answered with the right count; capacity: the largest count up to which at least half the prompts "
                 "of every count are answered right, greedily or with the correct count ranked first; the expected "
                 "count's mean error: the mean absolute difference between the expected count over the candidate "
                 "counts and the true count. The best probe is chosen on validation and scored on test; the best "
                 "logit-lens location is the one whose read-out ranks the correct count highest (mean rank, one is "
                 "first), beside the rank under the model's own read-out. The figure puts the tasks on the same "
                 "axes: where the accuracy falls against the count is the counting capacity; a gap between the "
                 "probe's curve and the lenses' is a count that is linearly there but not read out as the answer. "
                 "Definitions: docs/definitions.md.")
    manifold_section(page, rel, data)
    page.add(f'<p class="muted">Data: <a href="{html.escape(prefix + TASKS_FILE)}">{TASKS_FILE}</a>, '
             f'<a href="{html.escape(prefix + TASKS_CSV)}">{TASKS_CSV}</a></p>')


def _extreme(data: dict[str, Any], key: str, pick) -> tuple[int, int] | None:
    """(task, location) indices of the finite ``key`` of the tasks' manifold rows that ``pick`` (min or max)
    chooses; None where there is none."""
    found = [(float(r[key]), i, j) for i, t in enumerate(data["tasks"]) for j, r in enumerate(t.get("manifold") or [])
             if r.get(key) is not None and math.isfinite(float(r[key]))]
    return pick(found)[1:] if found else None


def manifold_section(page: Page, rel: str, data: dict[str, Any]) -> None:
    """The count manifold per task and location (``tasks[i].manifold`` of ``rel``), every number a span, with a
    caption of what the nearest toy shape can and cannot show, its ranges read from the rows; nothing where no
    task's manifold stage ran."""
    if not any(t.get("manifold") for t in data["tasks"]):
        return
    rows = []
    for i, t in enumerate(data["tasks"]):
        for j in range(len(t.get("manifold") or [])):
            key = ("tasks", i, "manifold", j)
            rows.append([page.v(rel, "tasks", i, "task"), page.v(rel, *key, "location"), page.v(rel, *key, "depth"),
                         page.v(rel, *key, "dims95"), page.values(rel, *key, "nearest_ties"),
                         page.v(rel, *key, "procrustes_nearest"), page.v_or_dash(rel, *key, "procrustes_margin"),
                         page.v(rel, *key, "shape_above_floor"),
                         f"{page.v(rel, *key, 'split_half_distance')} / {page.v(rel, *key, 'split_half_noise')}"])
    page.add(table(["task", "location", "relative depth", "intrinsic dimension", "nearest toy shape", "its Procrustes distance",
                    "runner-up's margin", "shape above its floor", "split-half distance / shuffled"], rows,
                   left=(0, 1, 4)))

    def at(key: str, pick) -> str:  # the span of the extreme value of key, with its task and location
        where = _extreme(data, key, pick)
        if where is None:
            return "—"
        i, j = where
        return (f"{page.v(rel, 'tasks', i, 'manifold', j, key)} ({page.v(rel, 'tasks', i, 'task')}, "
                f"{page.v(rel, 'tasks', i, 'manifold', j, 'location')})")
    page.caption(
        "The count manifold per task and location, read from each task's own manifold.json (docs/definitions.md, "
        "\"Count manifold\"): the intrinsic dimension, the principal components holding ninety-five percent of "
        "the count centroids' variance; the nearest toy shape, the toy variant whose "
        "letter-free boundary curve at the same counts is nearest the centroid curve by Procrustes distance "
        "(rotation, reflection and one scale; zero: congruent, at most two; variants whose curves are the same "
        "shape named together), and the runner-up's margin, the next "
        "variant's distance minus the nearest's. The shape stands above its floor where the curves of two halves "
        "of the prompts are nearer each other than under every shuffle of the count labels (never where a count "
        "has a single prompt: no halves to compare, the split-half distances nan). What it can show: "
        "whether a reproducible curve is nearer one construction's shape than the others'. What it cannot: the "
        "toy constructions' curves are all nearly straight and lie close to each other, so a name is weak where "
        f"the margin is small — here it runs from {at('procrustes_margin', min)} to "
        f"{at('procrustes_margin', max)}, beside nearest distances from {at('procrustes_nearest', min)} to "
        f"{at('procrustes_nearest', max)}; below its floor the curve is mostly noise and its nearest name says "
        "nothing; and a shape is not a cause (the DAS stage tests which subspace the answer is computed from).")


def render_tasks_page(folder: Path) -> str:
    """``tasks/index.html``: the comparison alone, read from ``folder/tasks.json``."""
    page = Page(Path(folder))
    page.add(f"<h1>Tasks side by side: {page.v(TASKS_FILE, 'model')}</h1>")
    page.add(f"<p>Preset {page.v(TASKS_FILE, 'preset')}.</p>")
    tasks_section(page, TASKS_FILE)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>countlens tasks</title>"
            "<style>body{font-family:system-ui,sans-serif;max-width:80rem;margin:2em auto}table{border-collapse:"
            "collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}img{max-width:100%}"
            ".caption{color:#555;font-size:.85em}</style></head><body>" + "\n".join(page.parts) + "</body></html>\n")


__all__ = ["TASKS_DIR", "TASKS_FILE", "TASKS_CSV", "EXTRA_TASK_SIZES", "parse_tasks", "task_folder_name", "task_stages",
           "task_capture", "TaskSummary",
           "TasksResult", "summarize_task", "compare_tasks", "plot_tasks", "tasks_section", "render_tasks_page"]
