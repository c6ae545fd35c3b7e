"""``countlens reproduce``: every experiment of the paper as resumable stages, and one HTML report.

Each stage runs one or more ``countlens`` commands in-process (the same code a user runs by hand) and
writes into ``OUT/<stage>/``. A finished stage leaves ``OUT/<stage>/stage.json`` (its commands, wall time,
files); a rerun skips it, so an interrupted ``reproduce`` only does what is missing. A failing stage is
reported by name, the stages that need it are skipped, the others still run, and the report shows what
exists. A command that is not installed fails its stage with "command not available", never a stand-in.

``OUT/index.html`` shows every figure and table with the config and package versions that made them and
each stage's wall time. Every number in it is a ``<span class="v">`` naming the JSON file and key it was
read from (``data-json``, ``data-key``), so a reader (and ``tests/integration/test_reproduce.py``) can check
each against the file beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.errors import UsageError
from countlens.io import provenance, read_json, write_json_atomic, write_text_atomic

STAGE_FILE = "stage.json"
REPORT_FILE = "reproduce.json"
CAPTURE_ACTS = "capture/acts"
COMPARE_VARIANTS = ("linear", "softmax", "softmax-postln-bare", "softmax-postln-learned")

# Sizes per preset: the extra arguments of each stage's command. "quick" is `make demo` (measured to fit
# 15 minutes on 2 cores, see BENCHMARKS.md); "full" is the paper's scale; "test" is a tiny
# preset for the test suite. The toy commands' own defaults are their reduced sizes.
_WINDOWS = ["--low", "1:10", "--high", "91:100", "--pca-counts", "1:100"]
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "toy-rates": ["--d", "16", "--L", "10,30,100,300,1000,3000"], "toy-lcap": ["--d", "3,4,8,16"],
        "toy-table2": [], "toy-table3": ["--d", "16", "--B", "10,30,100,300,1000"],
        "toy-figure1": [], "toy-figure2": [], "toy-figure3": [], "toy-figure4": [],
        "toy-construct": {"d": 16, "L": 100},
        # All four token pairs (Figure 5 averages them, as the paper does) and one wording: 1,212 prompts,
        # about 6 minutes on 2 idle cores; the whole quick report about 10.
        "capture": ["--L", "256", "--counts", "0:100", "--per-count", "1", "--seeds", "0,1,2",
                    "--configs", "count"],
        "geometry": _WINDOWS, "compare": ["--arc-counts", "1:100", *_WINDOWS],
    },
    "full": {
        "toy-rates": ["--d", "16", "--L", "10,30,100,300,1000,3000"], "toy-lcap": ["--d", "3,4,8,16"],
        "toy-table2": ["--full"], "toy-table3": ["--d", "16", "--B", "10,30,100,300,1000", "--attained-full"],
        "toy-figure1": [], "toy-figure2": ["--full"], "toy-figure3": ["--full"], "toy-figure4": ["--full"],
        "toy-construct": {"d": 16, "L": 100},
        # The capture's own defaults: all four token pairs and every wording (3,636 prompts).
        "capture": ["--L", "256", "--counts", "0:100", "--per-count", "1", "--seeds", "0,1,2"],
        "geometry": _WINDOWS, "compare": ["--arc-counts", "1:100", *_WINDOWS],
    },
    "test": {
        "toy-rates": ["--d", "4", "--L", "10,30"], "toy-lcap": ["--d", "3,4"],
        "toy-table2": ["--d", "4", "--L", "10", "--seeds", "0", "--steps", "5"],
        "toy-table3": ["--d", "4", "--B", "10", "--attained-grid", "5,10", "--attained-seeds", "0",
                       "--attained-steps", "5"],
        "toy-figure1": ["--L", "10"], "toy-figure2": ["--d", "4", "--L", "5,10", "--seeds", "0", "--steps", "5"],
        "toy-figure3": ["--d", "4", "--L", "10", "--seeds", "0", "--steps", "5"],
        "toy-figure4": ["--d", "4", "--L", "10", "--steps", "5", "--minibatch-steps", "5", "--batch-size", "16"],
        "toy-construct": {"d": 4, "L": 12},
        "capture": ["--L", "16", "--counts", "0:12", "--per-count", "1", "--seeds", "0,1", "--pairs", "a/b",
                    "--configs", "count"],
        "geometry": ["--low", "1:4", "--high", "8:11", "--pca-counts", "1:11"],
        "compare": ["--arc-counts", "1:11", "--low", "1:4", "--high", "8:11", "--pca-counts", "1:11"],
    },
}


@dataclass
class Stage:
    """One step of the report: ``commands`` are ``countlens`` argument lists; ``outputs`` (relative to
    the stage folder) must exist after they succeed; ``needs`` names stages whose outputs it reads."""

    name: str
    title: str
    commands: list[list[str]]
    outputs: list[str]
    needs: list[str] = field(default_factory=list)


def build_stages(out: Path, preset: str, model: str, model_args: list[str]) -> list[Stage]:
    """The stages of ``reproduce`` for ``preset`` (quick, full, test), writing under ``out``."""
    p = PRESETS[preset]
    s = {name: str(out / name) for name in (*p, "probe", "probe-sweep")}
    acts = str(out / CAPTURE_ACTS)
    construct = p["toy-construct"]
    table3 = f"{s['toy-table3']}/table3.json"
    stages = [
        Stage("toy-rates", "Table 1: B_min rates",
              [["toy", "rates", *p["toy-rates"], "--json", f"{s['toy-rates']}/rates.json"]], ["rates.json"]),
        Stage("toy-lcap", "Table 1: L_cap of bare pre-LN",
              [["toy", "lcap", *p["toy-lcap"], "--json", f"{s['toy-lcap']}/lcap.json"]], ["lcap.json"]),
        Stage("toy-table2", "Table 2: trained softmax",
              [["toy", "table2", *p["toy-table2"], "--json", f"{s['toy-table2']}/table2.json"]], ["table2.json"]),
        Stage("toy-table3", "Table 3: capacity under a cap",
              [["toy", "table3", "--attained", *p["toy-table3"], "--json", table3]], ["table3.json"]),
        Stage("toy-figure1", "Figure 1", [["toy", "figure1", *p["toy-figure1"], "--out", s["toy-figure1"]]],
              ["figure1.png"]),
        # Panel (d) of Figure 2 is Table 3's attained column: reuse it rather than train again.
        Stage("toy-figure2", "Figure 2", [["toy", "figure2", *p["toy-figure2"], "--table3", table3, "--out",
                                           s["toy-figure2"]]], ["figure2.png"], ["toy-table3"]),
        Stage("toy-figure3", "Figure 3", [["toy", "figure3", *p["toy-figure3"], "--out", s["toy-figure3"]]],
              ["figure3.png"]),
        Stage("toy-figure4", "Figure 4", [["toy", "figure4", *p["toy-figure4"], "--out", s["toy-figure4"]]],
              ["figure4.png"]),
        Stage("toy-construct", "Toy constructions for the comparison", [
            ["toy", "construct", "--variant", v, "--d", str(construct["d"]), "--L", str(construct["L"]), "--json",
             f"{s['toy-construct']}/{v}.json"] for v in COMPARE_VARIANTS], [f"{v}.json" for v in COMPARE_VARIANTS]),
        Stage("capture", "Capture: assistant-boundary residual stream",
              [["llm", "capture", "--model", model, *model_args, *p["capture"], "--out", acts]], ["acts/meta.json"]),
        Stage("probe", "Figure 7: ridge probes per location", [["probe", "--acts", acts, "--out", s["probe"]]],
              ["probes.json", "fig7_binned_accuracy.png"], ["capture"]),
        Stage("probe-sweep", "Figure 8: regularisation–norm sweep",
              [["probe", "sweep", "--acts", acts, "--out", s["probe-sweep"]]], ["sweep.json", "fig8_norm_sweep.png"],
              ["capture"]),
        Stage("geometry", "Figures 5 and 6: layerwise geometry",
              [["geometry", "--acts", acts, "--out", s["geometry"], *p["geometry"]]],
              ["geometry.json", "figure5.png", "figure6.png"], ["capture"]),
        Stage("compare", "Toy vs LLM",
              [["compare", "--acts", acts, "--toy", s["toy-construct"], "--toy-L", str(construct["L"]),
                *p["compare"], "--out", s["compare"]]], ["compare.json", "compare.png"],
              ["capture", "toy-construct"]),
    ]
    return stages


# ---------------------------------------------------------------- running

def command_available(argv: list[str]) -> bool:
    """Whether the ``countlens`` subcommand path at the start of ``argv`` (``toy rates``) is installed."""
    from countlens.cli import build_parser

    parser = build_parser()
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return True
        if word not in subs[0].choices:
            return False
        parser = subs[0].choices[word]
    return True


def _command_words(argv: list[str]) -> list[str]:
    words = []
    for word in argv:
        if word.startswith("-"):
            break
        words.append(word)
    return words


class _Tee(io.TextIOBase):
    """Writes to a stream and keeps a copy (the last lines explain a failure)."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.copy.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def run_command(argv: list[str], log: Path) -> tuple[int, str]:
    """Run ``countlens argv`` in-process. Returns (exit code, one-line reason on failure)."""
    from countlens.cli import main

    words = _command_words(argv)
    if not command_available(words):
        return 2, f"command not available: countlens {' '.join(words)} is not installed in this version"
    err = _Tee(sys.stderr)
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:  # argparse errors exit 2 with their one-line message
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # noqa: BLE001 - a crashing stage is reported, the others go on
        log.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(log, traceback.format_exc())
        return 1, f"{exc.__class__.__name__}: {exc} (traceback in {log})"
    if code == 0:
        return 0, ""
    if code == 130:  # the inner command caught Ctrl-C: stop the whole run (finished stages are kept)
        raise KeyboardInterrupt
    lines = [ln for ln in err.copy.getvalue().splitlines() if ln.strip()]
    return int(code), lines[-1] if lines else f"exit status {code}"


def stage_done(out: Path, stage: Stage) -> dict[str, Any] | None:
    """The finished stage's record if ``stage.json`` says done and every output is there."""
    path = out / stage.name / STAGE_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    if record.get("status") != "done" or not all((out / stage.name / o).exists() for o in stage.outputs):
        return None
    return record


def _stage_files(folder: Path) -> list[str]:
    """The stage's own top-level files (sub-folders hold activations or resume state, not results)."""
    return sorted(p.name for p in folder.iterdir()
                  if p.is_file() and p.name != STAGE_FILE and not p.name.startswith(".") and p.name != "error.log")


def _cpu_seconds() -> float:
    """CPU time (user + system, all threads) of this process: on a shared machine a steadier measure of a
    stage's cost than wall time."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_stage(out: Path, stage: Stage) -> dict[str, Any]:
    """Run every command of ``stage``; write ``stage.json`` on success. Returns the stage record."""
    folder = out / stage.name
    folder.mkdir(parents=True, exist_ok=True)
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    print(f"reproduce: stage {stage.name} ...", file=sys.stderr, flush=True)
    for argv in stage.commands:
        code, reason = run_command(argv, folder / "error.log")
        if code != 0:
            return {"stage": stage.name, "status": "failed", "reason": reason,
                    "command": "countlens " + " ".join(argv), "wall_s": time.perf_counter() - start}
    missing = [o for o in stage.outputs if not (folder / o).exists()]
    wall = time.perf_counter() - start
    if missing:
        return {"stage": stage.name, "status": "failed", "wall_s": wall,
                "reason": f"the commands finished but did not write {', '.join(missing)}"}
    record = {"stage": stage.name, "title": stage.title, "status": "done", "wall_s": wall,
              "cpu_s": _cpu_seconds() - cpu_start,
              "commands": ["countlens " + " ".join(a) for a in stage.commands], "files": _stage_files(folder)}
    write_json_atomic(folder / STAGE_FILE, record)
    (folder / "error.log").unlink(missing_ok=True)
    return record


def _refuse_other_settings(out: Path, stages: list[Stage]) -> None:
    """A finished stage made by other commands (another preset or model) is never mixed into this report."""
    for stage in stages:
        path = out / stage.name / STAGE_FILE
        if not path.is_file():
            continue
        try:
            recorded = json.loads(path.read_text(encoding="utf-8")).get("commands")
        except json.JSONDecodeError:
            continue
        if recorded is not None and recorded != ["countlens " + " ".join(a) for a in stage.commands]:
            raise UsageError(f"{out} holds a report made with other settings (stage {stage.name}); choose "
                             "another --out folder or delete it")


def reproduce(out: Path, preset: str, model: str, model_args: list[str], only: list[str] | None = None) -> dict:
    """Run (or reuse) every stage, then write ``reproduce.json`` and ``index.html``. Returns the summary."""
    stages = build_stages(out, preset, model, model_args)
    names = [s.name for s in stages]
    if only:
        unknown = [o for o in only if o not in names]
        if unknown:
            raise UsageError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    _refuse_other_settings(out, stages)
    out.mkdir(parents=True, exist_ok=True)
    records: dict[str, dict[str, Any]] = {}
    for stage in stages:
        done = stage_done(out, stage)
        if done is not None:
            records[stage.name] = {**done, "status": "done", "reused": True}
            continue
        if only and stage.name not in only:
            records[stage.name] = {"stage": stage.name, "status": "not run", "reason": "not selected by --stages"}
            continue
        blocked = [n for n in stage.needs if records.get(n, {}).get("status") != "done"]
        if blocked:
            records[stage.name] = {"stage": stage.name, "status": "skipped",
                                   "reason": f"needs stage {', '.join(blocked)}"}
            continue
        records[stage.name] = {**run_stage(out, stage), "reused": False}
        status = records[stage.name]["status"]
        print(f"reproduce: stage {stage.name} {status}"
              + (f": {records[stage.name]['reason']}" if status != "done" else
                 f" in {records[stage.name]['wall_s']:.1f} s"), file=sys.stderr, flush=True)
    summary = {
        "preset": preset, "model": model, "model_args": model_args, "out": str(out),
        "stages": [{"title": s.title, **records[s.name]} for s in stages],
        "provenance": provenance({"preset": preset, "model": model, "model_args": model_args,
                                  "sizes": PRESETS[preset]}),
    }
    write_json_atomic(out / REPORT_FILE, summary)
    from countlens.analysis.html_report import write_index

    write_index(out)
    return summary


def run_reproduce(args) -> int:
    preset = "full" if args.full else args.preset or "quick"
    if preset not in PRESETS:
        raise UsageError(f"unknown size preset {preset!r}; choose quick, full or test")
    model_args = []
    for flag, value in (("--gguf-file", args.gguf_file), ("--device", args.device), ("--dtype", args.dtype),
                        ("--template", args.template), ("--batch-size", args.batch_size)):
        if value is not None:
            model_args += [flag, str(value)]
    only = [s for s in args.stages.split(",") if s.strip()] if args.stages else None
    out = Path(args.out)
    summary = reproduce(out, preset, args.model, model_args, only)
    failed = [s for s in summary["stages"] if s["status"] in ("failed", "skipped")]
    for s in failed:
        print(f"reproduce: stage {s['stage']} {s['status']}: {s['reason']}", file=sys.stderr)
    print(f"reproduce: report written to {out / 'index.html'} "
          f"({sum(s['status'] == 'done' for s in summary['stages'])}/{len(summary['stages'])} stages done)")
    return 1 if failed else 0


def register_reproduce(subparsers) -> None:
    p = subparsers.add_parser(
        "reproduce", help="run every experiment (toy tables and figures, capture, probes, geometry, "
                          "comparison) and write OUT/index.html",
        description="Runs the paper's experiments as resumable stages into OUT/<stage>/ and writes "
                    "OUT/index.html. Finished stages are reused; a failed stage is reported by name.")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="reduced sizes (default; `make demo`)")
    size.add_argument("--full", action="store_true", help="the paper's sizes (hours)")
    size.add_argument("--preset", default=None, help=argparse.SUPPRESS)  # "test": tiny sizes for the test suite
    p.add_argument("--model", default="default", help="model for the capture: hub name, folder, GGUF, or "
                                                      "`default` (the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--gguf-file", default=None, help="GGUF file inside --model (passed to llm capture)")
    p.add_argument("--device", default=None, help="device for the capture (passed to llm capture)")
    p.add_argument("--dtype", default=None, help="dtype for the capture (passed to llm capture)")
    p.add_argument("--template", default=None, help="chat template override (passed to llm capture)")
    p.add_argument("--batch-size", type=int, default=None, help="capture batch size (passed to llm capture)")
    p.add_argument("--stages", default=None,
                   help="comma-separated stages to run (default: all): toy-rates, toy-lcap, toy-table2, "
                        "toy-table3, toy-figure1..4, toy-construct, capture, probe, probe-sweep, geometry, compare")
    p.add_argument("--out", required=True, help="report folder")
    p.set_defaults(func=run_reproduce)


__all__ = ["PRESETS", "Stage", "build_stages", "command_available", "run_command", "stage_done", "run_stage",
           "reproduce", "run_reproduce", "register_reproduce", "read_json"]
