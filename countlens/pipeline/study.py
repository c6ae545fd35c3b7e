"""``countlens study``: the whole analysis over several models, then one comparison across them.

For each model, capture (with the model's own answers, as the size presets record them) → probes →
geometry → toy-vs-LLM comparison (→ Figure 9's patching and steering, where asked) into
``OUT/models/<name>/``, with that model's own report (``index.html``). With
``--ray`` every model is one Ray task on its own GPU (or CPU slot); without it, the models run one after
another. A finished model leaves its summary in ``OUT/.study/`` (keyed by the model and every setting that
changes it), so a rerun recomputes only the models that did not finish.

Then the comparison across models: ``study.json`` and ``study.csv`` (one row per model: best
validation-selected probe accuracy and where, gap and effective-rank ratios after the first, middle and last
block, the nearest toy variant, behavioural accuracy where captured), ``study.png``/``.pdf`` (Figure 5's two
curves of every model against relative depth, location / number of blocks), and ``index.html`` linking each
model's report. Definitions: ``docs/definitions.md §2``.
"""

from __future__ import annotations

import dataclasses
import html
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from countlens.analysis.experiments import CompareResult, GeometryResult
from countlens.core.args import HelpFormatter
from countlens.core.cache import ResultCache
from countlens.core.errors import UsageError
from countlens.core.io import provenance, read_json, write_csv_atomic, write_json_atomic, write_text_atomic
from countlens.core.locations import location_label
from countlens.core.store import ANSWER_COLUMNS, column, load_capture, read_meta
from countlens.llm.experiments import preflight_capture
from countlens.pipeline.reproduce import ACTS, PRESETS, reproduce
from countlens.probes.experiments import ProbeResult

STUDY_FILE = "study.json"
TABLE_FILE = "study.csv"
FIGURE_STEM = "study"
MODELS_DIR = "models"
CACHE_DIR = ".study"
RETRIES = 2  # retries of a model's Ray task whose worker died; the model resumes from its finished stages
# The stages of each model's own report (the rest of `reproduce` is the toy theory, which is model-free),
# and Figure 9's causal tests, run where asked.
MODEL_STAGES = ("toy-construct", "capture", "probe", "geometry", "compare")
PATCHING_STAGES = ("patching", "steering")

# The table's columns between the model and its report: (CSV header, key path in a ModelSummary).
TABLE_COLUMNS = (
    ("n_blocks", ("n_blocks",)),
    ("best_probe_accuracy", ("best_probe", "test_rounded_acc")),
    ("best_probe_location", ("best_probe", "location")),
    *((f"{ratio}_{where}", ("at_blocks", where, ratio)) for ratio in ("gap_ratio", "erank_ratio")
      for where in ("first", "middle", "last")),
    ("nearest_toy_variant", ("nearest_toy_variant",)),
    ("behaviour_accuracy", ("behaviour_accuracy",)),
)
TABLE_HEADER = ["model", *(name for name, _ in TABLE_COLUMNS), "report"]


def model_folder_names(models: list[str]) -> list[str]:
    """One folder name per model spec (``org/name`` → ``org--name``, a path → its last part), unique."""
    names: list[str] = []
    for spec in models:
        path = Path(spec).expanduser()
        base = path.name if path.exists() else spec.replace("/", "--")
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.") or "model"
        name, k = base, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names.append(name)
    return names


def block_positions(n_blocks: int) -> dict[str, int]:
    """Location indices after the first, the middle and the last block (location ``l`` is the output of
    block ``l``; the middle is Figure 6's, ``(n_blocks + 1) // 2``)."""
    return {"first": min(1, n_blocks), "middle": max(min(1, n_blocks), (n_blocks + 1) // 2), "last": n_blocks}


@dataclass
class StudyConfig:
    """``countlens study``: ``models`` (specs as for ``llm capture --model``), the size ``preset`` of
    :data:`countlens.pipeline.reproduce.PRESETS` every model runs at, and ``capture`` — fields of the preset's
    :class:`~countlens.llm.experiments.CaptureConfig` set for every model (``device``, ``dtype``,
    ``batch_size``, ``template``, ...); ``patching`` adds Figure 9's patching and steering to every model's
    report."""

    models: tuple[str, ...]
    preset: str = "quick"
    capture: dict[str, Any] = field(default_factory=dict)
    patching: bool = False

    def __post_init__(self) -> None:
        self.models = tuple(str(m).strip() for m in self.models if str(m).strip())
        if not self.models:
            raise UsageError("models must name at least one model")
        twice = sorted({m for m in self.models if self.models.count(m) > 1})
        if twice:
            raise UsageError(f"models names {', '.join(twice)} more than once")
        if self.preset not in PRESETS:
            raise UsageError(f"unknown size preset {self.preset!r}; choose {', '.join(PRESETS)}")
        if "model" in self.capture:
            raise UsageError("capture settings are for every model; name the models in models")

    def jobs(self) -> list[dict[str, Any]]:
        """One job per model: its folder name, the preset, its capture settings and stages (what keys its
        result)."""
        stages = list(MODEL_STAGES) + (list(PATCHING_STAGES) if self.patching else [])
        return [{"model": m, "name": name, "preset": self.preset, "capture": {**self.capture, "model": m},
                 "stages": stages} for m, name in zip(self.models, model_folder_names(list(self.models)), strict=True)]

    def to_dict(self) -> dict[str, Any]:
        return {"models": list(self.models), "preset": self.preset, "capture": dict(self.capture),
                "patching": self.patching}


@dataclass
class ModelSummary:
    """One model's row of the comparison, and its Figure 5 curves.

    ``relative_depth`` (L+1,) is location / number of blocks (0 = embeddings, 1 = after the last block);
    ``gap_ratio`` and ``erank_ratio`` (L+1,) are Figure 5's two curves at those locations (mean over
    seeds). ``best_probe`` holds the validation-selected location and its test rounded accuracy;
    ``at_blocks`` the two ratios after the first, middle and last block; ``behaviour_accuracy`` is the
    share of prompts the model answered correctly, ``None`` where answers were not captured.
    """

    model: str
    name: str
    n_blocks: int
    relative_depth: list[float]
    gap_ratio: list[float]
    erank_ratio: list[float]
    best_probe: dict[str, Any]
    at_blocks: dict[str, dict[str, Any]]
    nearest_toy_variant: str | None
    behaviour_accuracy: float | None
    report: str

    def value(self, keys: tuple[str, ...]) -> Any:
        """The field at the key path ``keys`` (``("at_blocks", "first", "gap_ratio")``)."""
        value: Any = asdict(self)
        for key in keys:
            value = value[key]
        return value

    def table_row(self) -> list[Any]:
        """The model's row of ``study.csv`` (:data:`TABLE_HEADER`)."""
        return [self.model, *(self.value(keys) for _, keys in TABLE_COLUMNS), self.report]


@dataclass
class StudyResult:
    """``countlens study``: one :class:`ModelSummary` per model, in the order asked, and the settings."""

    config: dict[str, Any]
    models: list[ModelSummary]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "models": [asdict(m) for m in self.models], "provenance": self.provenance}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyResult:
        return cls(config=data["config"], models=[ModelSummary(**m) for m in data["models"]],
                   provenance=data.get("provenance", {}))

    def save(self, folder: str | Path) -> list[Path]:
        """``study.json`` (with provenance) and ``study.csv`` (one row per model) in ``folder``."""
        folder = Path(folder)
        if not self.provenance:
            self.provenance = provenance(self.config)
        return [write_json_atomic(folder / STUDY_FILE, self.to_dict()),
                write_csv_atomic(folder / TABLE_FILE, TABLE_HEADER, [m.table_row() for m in self.models])]


# ---------------------------------------------------------------- the cross-model figure and page

def plot_study(result: StudyResult):
    """Figure 5's two curves (gap ratio solid, effective-rank ratio dashed) of every model against relative
    depth, one colour per model, log scale."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, m in enumerate(result.models):
        colour = colours[k % len(colours)]
        ax.plot(m.relative_depth, m.gap_ratio, "-o", ms=3, color=colour, label=f"{m.name}: gap ratio")
        ax.plot(m.relative_depth, m.erank_ratio, "--s", ms=3, color=colour, label=f"{m.name}: erank ratio")
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlim(0, 1)
    ax.set_xlabel("relative depth (location / number of blocks)")
    ax.set_ylabel("high / low count window")
    ax.set_title("Figure 5 across models")
    ax.legend(fontsize=7, ncol=2 if len(result.models) > 3 else 1)
    fig.tight_layout()
    return fig


def draw_study(result: StudyResult, folder: str | Path) -> list[Path]:
    """Save :func:`plot_study` as ``study.png`` and ``study.pdf`` in ``folder``."""
    from countlens.core.io import save_figure

    return save_figure(plot_study(result), Path(folder) / FIGURE_STEM)


def _cell(value: Any, json_key: str) -> str:
    """One table cell; a number is a ``<span class="v">`` naming the ``study.json`` key it was read from."""
    if value is None:
        return "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        return f'<span class="v" data-json="{STUDY_FILE}" data-key="{json_key}">{text}</span>'
    return html.escape(str(value))


def render_study_page(result: StudyResult) -> str:
    """The study's ``index.html``: the cross-model figure, the table, a link to each model's report."""
    rows = []
    for k, m in enumerate(result.models):
        cells = [f'<a href="{html.escape(m.report)}">{html.escape(m.name)}</a>'] + \
                [_cell(m.value(keys), ".".join(["models", str(k), *keys])) for _, keys in TABLE_COLUMNS]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h.replace('_', ' '))}</th>" for h in ["model", *TABLE_HEADER[1:-1]])
    versions = ", ".join(f"{k} {v}" for k, v in (result.provenance.get("versions") or {}).items())
    return "\n".join([
        "<!doctype html>", '<html><head><meta charset="utf-8"><title>countlens study</title>',
        "<style>body{font-family:sans-serif;max-width:72em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}td:first-child{text-align:left}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>countlens study: {len(result.models)} models</h1>",
        "<p>Each model's own report is linked from its name. Ratios are high / low count window (definitions "
        "in docs/definitions.md §2); first, middle and last are the locations after those blocks; the probe "
        "accuracy is the test rounded accuracy at the location chosen on validation; the nearest toy variant "
        "is the toy construction closest after the first block in (log gap ratio, log erank ratio); the "
        "behavioural accuracy is the share of prompts the model itself answered with the right count.</p>",
        f'<img src="{FIGURE_STEM}.png" alt="Figure 5 across models">',
        f"<table><tr>{header}</tr>", *rows, "</table>",
        f"<p>Table as CSV: <a href=\"{TABLE_FILE}\">{TABLE_FILE}</a>; all numbers with their settings: "
        f"<a href=\"{STUDY_FILE}\">{STUDY_FILE}</a>.</p>",
        f"<p><small>{html.escape(versions)}</small></p>", "</body></html>"])


def write_study_page(result: StudyResult, folder: str | Path) -> Path:
    return write_text_atomic(Path(folder) / "index.html", render_study_page(result))


# ---------------------------------------------------------------- one model

def model_folder(out: str | Path, job: dict[str, Any]) -> Path:
    return Path(out) / MODELS_DIR / job["name"]


def _capture_config(job: dict[str, Any]):
    return dataclasses.replace(PRESETS[job["preset"]]["capture"], **job["capture"])


def preflight_model(out: str | Path, job: dict[str, Any]) -> None:
    """Refuse (one line) a model that cannot be captured, or a folder holding another capture; reads only
    the tokenizer and the model's config."""
    try:
        preflight_capture(_capture_config(job), model_folder(out, job) / "capture" / ACTS, progress=False)
    except UsageError as exc:
        raise UsageError(f"model {job['model']}: {exc}") from None


def run_study_model(job: dict[str, Any], out: str | Path, device: str | None = None) -> dict[str, Any]:
    """One model's pipeline (its stages of :func:`countlens.pipeline.reproduce.reproduce`, so its own report and
    its per-stage resume) into ``OUT/models/<name>/``; returns its :class:`ModelSummary` as a dict.
    ``device`` overrides the job's (a Ray task's own GPU). :class:`UsageError` names the model and the
    first stage that did not finish."""
    folder = model_folder(out, job)
    capture = {**job["capture"], **({"device": device} if device else {})}
    report = reproduce(folder, job["preset"], capture, only=job["stages"])
    for stage in report["stages"]:
        if stage["stage"] in job["stages"] and stage["status"] != "done":
            raise UsageError(f"model {job['model']}: stage {stage['stage']} {stage['status']}: "
                             f"{stage.get('reason', '')}")
    return asdict(summarize_model(job, folder, Path(out)))


def _ratio(value: Any) -> float:
    return float(value)  # JSON holds non-finite ratios as the strings "inf" and "nan"


def summarize_model(job: dict[str, Any], folder: Path, out: Path) -> ModelSummary:
    """A model's :class:`ModelSummary` from its stages' saved results (geometry, probes, compare, capture)."""
    meta = read_meta(folder / "capture" / ACTS)
    n_blocks = int(meta["n_blocks"])
    geometry = GeometryResult.from_dict(read_json(folder / "geometry" / "geometry.json", "geometry result"))
    probes = ProbeResult.from_dict(read_json(folder / "probe" / "probes.json", "probe result"))
    compare = CompareResult.from_dict(read_json(folder / "compare" / "compare.json", "comparison result"))
    names = ["embed"] + [f"blocks.{i}.hook_resid_post" for i in range(n_blocks)]
    by_name = {r["name"]: r for r in geometry.per_location}
    curve = [(i / n_blocks, by_name[n]) for i, n in enumerate(names) if n in by_name]
    at_blocks = {}
    for where, li in block_positions(n_blocks).items():
        row = by_name.get(names[li], {})
        at_blocks[where] = {"location": location_label(names[li]), "gap_ratio": _ratio(row.get("gap_ratio", "nan")),
                            "erank_ratio": _ratio(row.get("erank_ratio", "nan"))}
    best = probes.best_location()
    nearest = compare.closest_toy().get(f"LLM {location_label(names[min(1, n_blocks)])}")
    return ModelSummary(
        model=job["model"], name=job["name"], n_blocks=n_blocks, relative_depth=[d for d, _ in curve],
        gap_ratio=[_ratio(r["gap_ratio"]) for _, r in curve], erank_ratio=[_ratio(r["erank_ratio"]) for _, r in curve],
        best_probe={"location": location_label(best.name), "index": best.index,
                    "test_rounded_acc": best.stat("test_rounded_acc")[0],
                    "val_rounded_acc": best.stat("val_rounded_acc")[0]},
        at_blocks=at_blocks, nearest_toy_variant=nearest, behaviour_accuracy=behaviour_accuracy(folder / "capture" / ACTS),
        report=str((folder / "index.html").relative_to(out)))


def behaviour_accuracy(acts: Path) -> float | None:
    """The share of prompts whose parsed answer equals the count, for a capture with answers; else ``None``."""
    ds = load_capture(acts)
    if not set(ANSWER_COLUMNS) <= set(ds.column_names):
        return None
    answers, counts = ds["answer"], column(ds, "n")
    return float(sum(a is not None and int(a) == int(n) for a, n in zip(answers, counts, strict=True)) / len(ds))


# ---------------------------------------------------------------- the study

def run_study(config: StudyConfig, out: str | Path, ray: str | None = None,
              log=None) -> tuple[StudyResult, dict[str, str]]:
    """Every model of ``config`` (reusing those finished before), then the comparison across the models
    that finished. Returns the result and, per model that did not finish, why. ``ray`` runs each model as a
    Ray task (a target as for ``llm capture --ray``); ``log(line)`` receives one line per model."""
    out = Path(out)
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    cache = ResultCache(out / CACHE_DIR, "model")
    jobs = config.jobs()
    summaries: dict[str, dict[str, Any]] = {}
    for job in jobs:
        hit = cache.get(job)
        if hit is not None:
            summaries[job["name"]] = hit
            log(f"study: {job['model']} reused")
    todo = [job for job in jobs if job["name"] not in summaries]
    for job in todo:
        preflight_model(out, job)
    out.mkdir(parents=True, exist_ok=True)
    failures = (_run_on_ray if ray is not None else _run_in_turn)(todo, out, ray, cache, summaries, log)
    result = StudyResult(config=config.to_dict(), models=[ModelSummary(**summaries[j["name"]]) for j in jobs
                                                          if j["name"] in summaries])
    if result.models:
        result.save(out)
        draw_study(result, out)
        write_study_page(result, out)
    return result, failures


def _run_in_turn(todo, out, ray, cache, summaries, log) -> dict[str, str]:
    failures = {}
    for job in todo:
        started = time.perf_counter()
        try:
            summaries[job["name"]] = cache.put(job, run_study_model(job, out))
        except UsageError as exc:
            failures[job["model"]] = str(exc)
            log(f"study: {exc}")
            continue
        log(f"study: {job['model']} done in {time.perf_counter() - started:.1f} s")
    return failures


def _run_on_ray(todo, out, target, cache, summaries, log) -> dict[str, str]:
    from countlens.llm.distributed import ray_cluster

    failures: dict[str, str] = {}
    if not todo:
        return failures
    with ray_cluster(target) as ray:
        on_gpu = ray.cluster_resources().get("GPU", 0) >= 1 and _capture_config(todo[0]).device != "cpu"
        resources = {"num_gpus": 1, "num_cpus": 1} if on_gpu else {"num_cpus": 1}
        task = ray.remote(run_study_model).options(max_retries=RETRIES, **resources)
        # each GPU task sees only its own GPU, as cuda
        pending = {task.remote(job, str(out), "cuda" if on_gpu else None): (job, time.perf_counter()) for job in todo}
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            job, started = pending.pop(ref)
            try:
                summaries[job["name"]] = cache.put(job, ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - one model failing leaves the others running
                cause = getattr(exc, "cause", None) or exc
                failures[job["model"]] = str(cause).strip().splitlines()[0] if str(cause).strip() else repr(cause)
                log(f"study: {failures[job['model']]}")
                continue
            log(f"study: {job['model']} done in {time.perf_counter() - started:.1f} s on Ray")
    return failures
# ---------------------------------------------------------------- the command

DESCRIPTION = """\
Run the analysis over several models and compare them: for each model, capture -> probes -> geometry ->
toy comparison into OUT/models/<name>/ with its own report; then OUT/study.png (Figure 5's two curves of
every model against relative depth), OUT/study.csv and OUT/index.html linking every model's report.
A finished model is reused on a rerun; with --ray each model is one Ray task on its own GPU or CPU slot.
"""


def register(subparsers) -> None:
    from countlens.llm.experiments import CaptureConfig

    capture = CaptureConfig()
    p = subparsers.add_parser("study", help="the analysis over several models, and one comparison across them",
                              description=DESCRIPTION, formatter_class=HelpFormatter)
    p.add_argument("--models", required=True,
                   help="comma-separated models, each as for llm capture --model (hub id, folder, .gguf, default)")
    p.add_argument("--out", required=True, help="study folder (a rerun reuses the models finished before)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="the paper's sizes for every model (default: quick)")
    size.add_argument("--preset", choices=tuple(PRESETS), default=None,
                      help="size preset by name: quick, full, or test (tiny sizes for the test suite) "
                           "(default: quick)")
    p.add_argument("--ray", nargs="?", const="auto", default=None, metavar="auto|ADDRESS|local:N",
                   help="run each model as a Ray task: auto (the cluster this machine joined), a cluster address, "
                        "or local:N (N slots here); --out must be on storage every node sees "
                        "(default: no Ray, one model after another)")
    p.add_argument("--device", default=capture.device, help="device of every capture: cpu, cuda, cuda:N, mps, auto")
    p.add_argument("--dtype", default=capture.dtype, choices=("float32", "float16", "bfloat16"),
                   help="the models' compute dtype")
    p.add_argument("--batch-size", type=int, default=capture.batch_size, help="prompts per forward pass")
    p.add_argument("--template", choices=("chat", "plain"), default=capture.template,
                   help="chat: each model's chat template; plain: '<instruction>\\nAnswer:'")
    p.add_argument("--patching", action="store_true",
                   help="also run Figure 9 (boundary patching and steering along the probe) in every model's report")
    p.set_defaults(func=cmd_study)


def cmd_study(args) -> int:
    from countlens.core.args import reword
    from countlens.llm.experiments import FLAGS

    capture = {"device": args.device, "dtype": args.dtype, "batch_size": args.batch_size, "template": args.template}
    out = Path(args.out)
    try:
        config = StudyConfig(models=tuple(args.models.split(",")), preset="full" if args.full else args.preset or
                             "quick", capture=capture, patching=args.patching)
        result, failures = run_study(config, out, args.ray)
    except UsageError as exc:
        raise reword(exc, {**FLAGS, "models": "--models", "ray target": "--ray"}) from None
    if result.models:
        print(f"study: {len(result.models)} of {len(config.models)} models compared in {out / 'index.html'}")
    return 1 if failures else 0


__all__ = ["MODEL_STAGES", "PATCHING_STAGES", "StudyConfig", "ModelSummary", "StudyResult", "model_folder_names", "block_positions",
           "preflight_model", "run_study_model", "summarize_model", "behaviour_accuracy", "run_study", "plot_study",
           "draw_study", "render_study_page", "write_study_page", "register", "cmd_study"]
