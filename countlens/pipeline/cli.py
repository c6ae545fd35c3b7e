"""The countlens command: one entry point, one subcommand per area, and the pipeline's own commands.

Each room registers its own subcommands (``register(subparsers)`` in ``countlens.<room>.cli``); this module
adds ``reproduce`` and ``study``, parses, dispatches, and turns bad input into a one-line error with exit
status 2 — a :class:`~countlens.core.errors.ConfigError` worded with the flags of the command that ran
(:func:`countlens.core.args.cli_message`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from countlens.core.args import (
    HelpFormatter,
    OneLineParser,
    add_common_options,
    also_sets,
    cli_message,
    threaded,
)
from countlens.core.errors import EXIT_USAGE, UsageError

DESCRIPTION = """How a transformer represents a count, and what that costs in parameter norm.

  countlens reproduce --quick --out report   every table and figure, and report/index.html
  countlens study --models A,B --out study   the analysis over several models, and one comparison
  countlens toy ...                          the toy theory: constructions, checks, Tables 1-3, Figures 1-4
  countlens llm ...                          chat-model capture and its causal experiments: Figures 9, 11-15
  countlens organism ...                     chat models trained to count, their circuit planted, and checked
  countlens probe ...                        ridge probes: Figures 7, 8 and 10
  countlens geometry / compare               Figures 5 and 6, toy vs LLM

Definitions of every quantity: docs/definitions.md. Each command's --help lists its options."""

# The rooms' command modules, each with register(subparsers), by the commands they add; only this module
# imports them, and only the one a command line names (so `countlens toy ...` does not import the LLM side).
_AREAS = {
    "toy": "countlens.toy.cli",
    "llm": "countlens.llm.cli",
    "probe": "countlens.probes.cli",
    "geometry": "countlens.analysis.cli",
    "compare": "countlens.analysis.cli",
    "organism": "countlens.llm.organisms.cli",
}
_PIPELINE = ("reproduce", "study")
# The capture options reproduce and study take (declared once, by the llm room's command line).
REPRODUCE_CAPTURE = ("model", "gguf_file", "revision", "device", "dtype", "template", "task", "batch_size", "no_cache")
STUDY_CAPTURE = ("device", "dtype", "batch_size", "template", "task", "no_cache")


class Parser(OneLineParser):
    """The parser of every countlens command: one-line errors, and :class:`~countlens.core.args.HelpFormatter`
    (defaults shown, description line breaks kept) unless a command asks for another formatter. Subcommand
    parsers inherit the class."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def _named_command(argv: list[str] | None) -> str | None:
    """The command a command line names (its first argument), if it is one of ours."""
    first = argv[0] if argv else None
    return first if first in _PIPELINE or first in _AREAS else None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The countlens parser: every command, or only the one ``argv`` names (a faster start)."""
    parser = Parser(prog="countlens", description=DESCRIPTION)
    from countlens import __version__

    parser.add_argument("--version", action="version", version=f"countlens {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    command = _named_command(argv)
    if command in (None, "reproduce"):
        register_reproduce(sub)
    if command in (None, "study"):
        register_study(sub)
    for module in dict.fromkeys(m for c, m in _AREAS.items() if command in (None, c)):
        importlib.import_module(module).register(sub)
    return parser


def _add_preset(p: argparse.ArgumentParser, full_help: str) -> None:
    from countlens.pipeline.experiments import PRESETS

    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the reduced sizes (the default; make demo)")
    size.add_argument("--full", action="store_true", help=full_help)
    size.add_argument("--preset", choices=tuple(PRESETS), default=None,
                      help="size preset by name: quick, full, or test (tiny sizes for the test suite) "
                           "(default: quick)")


def _preset(args: argparse.Namespace) -> str:
    return "full" if args.full else args.preset or "quick"


def register_reproduce(subparsers) -> None:
    from countlens.llm.capture.options import add_capture_options
    from countlens.pipeline.experiments import stage_titles

    names = stage_titles()
    width = max(len(n) for n in names)
    p = subparsers.add_parser(
        "reproduce", help="run every experiment (toy tables and figures, capture, probes, geometry, comparison) "
                          "and write OUT/index.html",
        description="Runs the paper's experiments as resumable stages into OUT/<stage>/ and writes OUT/index.html.\n"
                    "Finished stages are reused; a failed stage is reported by name and the others still run.",
        epilog="stages (run in this order; --stages picks some):\n"
               + "\n".join(f"  {n:<{width}}  {t}" for n, t in names.items()))
    _add_preset(p, "the paper's sizes (hours)")
    add_capture_options(p, REPRODUCE_CAPTURE, defaults=None)
    p.add_argument("--stages", default=None,
                   help="comma-separated stages to run, from the list below (default: all)")
    p.add_argument("--tasks", default=None, metavar="TASK,TASK,...",
                   help="also run the capture, probes, geometry and lenses on these counting tasks (as --task "
                        "writes them, e.g. repeat:separator=comma,repeat:separator=space) into OUT/tasks/<task>/, "
                        "and compare them with --task's on the report (default: none)")
    p.add_argument("--out", required=True, help="report folder")
    add_common_options(p, "quiet", "threads", threads=None)
    p.set_defaults(func=cmd_reproduce)


@threaded
def cmd_reproduce(args: argparse.Namespace) -> int:
    from countlens.llm.capture.options import capture_options
    from countlens.pipeline.reproduce import reproduce
    from countlens.pipeline.tasks import parse_tasks

    only = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages else None
    out = Path(args.out)
    tasks = parse_tasks(args.tasks) if args.tasks else ()
    summary = reproduce(out, _preset(args), capture_options(args, REPRODUCE_CAPTURE), only, tasks=tasks,
                        progress=not args.quiet)
    failed = [s for s in summary["stages"] if s["status"] in ("failed", "skipped")]
    for s in failed:
        print(f"reproduce: stage {s['stage']} {s['status']}: {s['reason']}", file=sys.stderr)
    done = sum(s["status"] == "done" for s in summary["stages"])
    for t in summary.get("tasks", []):
        if t["status"] != "done":
            print(f"reproduce: task {t['task']} {t['status']}: {t['reason']}", file=sys.stderr)
    print(f"reproduce: report written to {out / 'index.html'} ({done}/{len(summary['stages'])} stages done)")
    return 1 if failed or any(t["status"] != "done" for t in summary.get("tasks", [])) else 0


STUDY_DESCRIPTION = """\
Run the analysis over several models and compare them: for each model, capture -> probes -> geometry ->
toy comparison into OUT/models/<name>/ with its own report; then OUT/study.png (Figure 5's two curves of
every model against relative depth), OUT/study.csv and OUT/index.html linking every model's report.
A finished model is reused on a rerun; with --ray each model is one Ray task on its own GPU or CPU slot.
"""


def _titles(group: str) -> str:
    """The titles of the experiments of study group ``group``, for an option's help."""
    from countlens.pipeline.experiments import stage_titles, study_stages

    titles = stage_titles()
    return "; ".join(titles[name] for name in study_stages(group))


def register_study(subparsers) -> None:
    from countlens.llm.capture.options import add_capture_options

    p = subparsers.add_parser("study", help="the analysis over several models, and one comparison across them",
                              description=STUDY_DESCRIPTION)
    p.add_argument("--models", required=True, type=lambda text: tuple(text.split(",")),
                   help="comma-separated models, each as for llm capture --model (hub id, folder, .gguf, default)")
    p.add_argument("--out", required=True, help="study folder (a rerun reuses the models finished before)")
    _add_preset(p, "the paper's sizes for every model (default: quick)")
    p.add_argument("--ray", nargs="?", const="auto", default=None, metavar="auto|ADDRESS|local:N",
                   help="run each model as a Ray task: auto (the cluster this machine joined), a cluster address, "
                        "or local:N (N slots here); --out must be on storage every node sees "
                        "(default: no Ray, one model after another)")
    add_capture_options(p, STUDY_CAPTURE, defaults=None,
                        helps={"task": "the counting task of every model's own report, NAME or "
                                       "NAME:option=value,... as for reproduce --task"})
    also_sets(p, model="models")  # an error about one model's `model` names --models
    p.add_argument("--patching", action="store_true",
                   help="also run, in every model's report: " + _titles("patching"))
    p.add_argument("--where", action="store_true", help="also run, in every model's report: " + _titles("where"))
    p.add_argument("--tasks", default=None, metavar="TASK,TASK,...",
                   help="also run every model on each of these counting tasks (as --task writes them, e.g. "
                        "repeat:separator=comma,repeat:separator=space,letters), the lenses added, and compare "
                        "each model's tasks with --task's side by side in OUT/tasks/<model>/ (default: none, "
                        "--task's alone)")
    add_common_options(p, "quiet", "threads", threads=None)
    p.set_defaults(func=cmd_study)


@threaded
def cmd_study(args: argparse.Namespace) -> int:
    from countlens.llm.capture.options import capture_options
    from countlens.pipeline.study import StudyConfig, run_study

    out = Path(args.out)
    from countlens.pipeline.tasks import parse_tasks

    config = StudyConfig(models=args.models, preset=_preset(args), capture=capture_options(args, STUDY_CAPTURE),
                         patching=args.patching, where=args.where,
                         tasks=parse_tasks(args.tasks) if args.tasks else ())
    result, failures = run_study(config, out, args.ray, progress=not args.quiet)
    if result.models:
        what = f"{len(config.jobs())} runs (models × tasks)" if config.tasks else f"{len(config.models)} models"
        print(f"study: {len(result.models)} of {what} compared in {out / 'index.html'}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except UsageError as exc:
        print(f"countlens: error: {cli_message(exc, getattr(args, '_parser', None))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("countlens: interrupted; finished results are kept, rerun the same command to resume",
              file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
