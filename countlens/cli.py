"""The ``countlens`` command: one entry point, one subcommand per area.

Each area registers its own subcommands (``register(subparsers)`` in ``countlens.<area>.cli``); this module
only parses, dispatches, and turns bad input into a one-line error with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from countlens.args import OneLineParser
from countlens.errors import EXIT_USAGE, UsageError

# (module, what it adds) — imported lazily so `countlens toy ...` never pays for torch-heavy LLM imports.
_AREAS = (
    "countlens.toy.cli",
    "countlens.llm.cli",
    "countlens.probes.cli",
    "countlens.analysis.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="countlens", description=__doc__.splitlines()[0])
    from countlens import __version__

    parser.add_argument("--version", action="version", version=f"countlens {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for name in _AREAS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the area has no CLI yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except UsageError as exc:
        print(f"countlens: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("countlens: interrupted; finished results are kept, rerun the same command to resume",
              file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
