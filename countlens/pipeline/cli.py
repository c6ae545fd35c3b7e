"""The countlens command: one entry point, one subcommand per area, and the pipeline.

Each area registers its own subcommands (``register(subparsers)`` in ``countlens.<area>.cli``); this module
adds ``reproduce`` (:mod:`countlens.pipeline.reproduce`), parses, dispatches, and turns bad input into a one-line
error with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from countlens.core.args import HelpFormatter, OneLineParser, cli_message
from countlens.core.errors import EXIT_USAGE, UsageError

DESCRIPTION = """How a transformer represents a count, and what that costs in parameter norm.

  countlens reproduce --quick --out report   every table and figure, and report/index.html
  countlens toy ...                          the toy theory: constructions, checks, Tables 1-3, Figures 1-4
  countlens llm ...                          chat-model prompts and residual-stream capture
  countlens probe ...                        ridge probes: Figures 7 and 8
  countlens geometry / compare               Figures 5 and 6, toy vs LLM

Definitions of every quantity: docs/definitions.md. Each command's --help lists its options."""

# The areas' command modules, each with register(subparsers), by the commands they add; only this module
# imports them, and only the one a command line names (so `countlens toy ...` does not import the LLM side).
_AREAS = {
    "toy": "countlens.toy.cli",
    "llm": "countlens.llm.cli",
    "probe": "countlens.probes.cli",
    "geometry": "countlens.analysis.cli",
    "compare": "countlens.analysis.cli",
    "study": "countlens.pipeline.study",
}


class Parser(OneLineParser):
    """The parser of every countlens command: one-line errors, and :class:`~countlens.core.args.HelpFormatter`
    (defaults shown, description line breaks kept) unless a command asks for another formatter. Subcommand
    parsers inherit the class."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def _named_command(argv: list[str] | None) -> str | None:
    """The command a command line names (its first argument), if it is one of ours."""
    first = argv[0] if argv else None
    return first if first == "reproduce" or first in _AREAS else None


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
    for module in dict.fromkeys(m for c, m in _AREAS.items() if command in (None, c)):
        importlib.import_module(module).register(sub)
    return parser


def register_reproduce(subparsers) -> None:
    from countlens.llm.experiments import CaptureConfig
    from countlens.pipeline.reproduce import PRESETS, stage_titles

    names = stage_titles()
    width = max(len(n) for n in names)
    p = subparsers.add_parser(
        "reproduce", help="run every experiment (toy tables and figures, capture, probes, geometry, comparison) "
                          "and write OUT/index.html",
        description="Runs the paper's experiments as resumable stages into OUT/<stage>/ and writes OUT/index.html.\n"
                    "Finished stages are reused; a failed stage is reported by name and the others still run.",
        epilog="stages (run in this order; --stages picks some):\n"
               + "\n".join(f"  {n:<{width}}  {t}" for n, t in names.items()))
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the reduced sizes (the default; make demo)")
    size.add_argument("--full", action="store_true", help="the paper's sizes (hours)")
    size.add_argument("--preset", choices=tuple(PRESETS), default=None,
                      help="size preset by name: quick, full, or test (tiny sizes for the test suite) "
                           "(default: quick)")
    p.add_argument("--model", default="default", help="model for the capture: hub name, folder, GGUF file, or "
                                                      "default (the embedded SmolLM2-135M-Instruct)")
    capture = CaptureConfig()
    p.add_argument("--gguf-file", default=None, help="GGUF file inside --model, as for llm capture (default: the "
                                                     "folder's only GGUF file)")
    p.add_argument("--device", default=None, help=f"device for the capture (default: {capture.device})")
    p.add_argument("--dtype", default=None, help=f"the model's compute dtype for the capture (default: {capture.dtype})")
    p.add_argument("--template", default=None, help="chat template for the capture: chat, or plain for a model "
                                                    f"without one (default: {capture.template})")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"prompts per forward pass in the capture (default: {capture.batch_size})")
    p.add_argument("--stages", default=None,
                   help="comma-separated stages to run, from the list below (default: all)")
    p.add_argument("--out", required=True, help="report folder")
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from countlens.pipeline.reproduce import reproduce

    preset = "full" if args.full else args.preset or "quick"
    capture = {"model": args.model, "gguf_file": args.gguf_file, "device": args.device, "dtype": args.dtype,
               "template": args.template, "batch_size": args.batch_size}
    only = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages else None
    out = Path(args.out)
    summary = reproduce(out, preset, {k: v for k, v in capture.items() if v is not None}, only)
    failed = [s for s in summary["stages"] if s["status"] in ("failed", "skipped")]
    for s in failed:
        print(f"reproduce: stage {s['stage']} {s['status']}: {s['reason']}", file=sys.stderr)
    done = sum(s["status"] == "done" for s in summary["stages"])
    print(f"reproduce: report written to {out / 'index.html'} ({done}/{len(summary['stages'])} stages done)")
    return 1 if failed else 0


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
