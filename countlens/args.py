"""What every room's command line shares: the one-line-error parser, the help formatter, and the parsers
for lists, ranges and count windows.

These turn text into values and raise :class:`~countlens.errors.UsageError` naming the flag; the
numerics never see a flag name.
"""

from __future__ import annotations

import argparse

from countlens.errors import EXIT_USAGE, UsageError


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the fix, with exit status 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions keep their line breaks; every option with a default shows it as ``(default: X)``."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        hidden = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "(default" in text or hidden or action.required:
            return text
        return super()._get_help_string(action)


def parse_float_list(text: str, name: str) -> list[float]:
    """Parse ``"10,30,100"`` into floats, raising :class:`UsageError` naming the flag on bad input."""
    try:
        values = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{name} must be a comma-separated list of numbers, got {text!r}") from None
    if not values:
        raise UsageError(f"{name} must not be empty")
    return values


def parse_int_list(text: str, name: str) -> list[int]:
    """Parse ``"3,4,8"`` (or a range ``"0:100"``, inclusive) into ints; :class:`UsageError` on bad input."""
    text = str(text).strip()
    try:
        if ":" in text and "," not in text:
            lo, hi = (int(v) for v in text.split(":"))
            if hi < lo:
                raise ValueError
            return list(range(lo, hi + 1))
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{name} must be integers like 1,2,3 or a range like 0:100, got {text!r}") from None
    if not values:
        raise UsageError(f"{name} must not be empty")
    return values


def parse_window(text: str, name: str) -> tuple[int, int]:
    """An inclusive count window: ``"91:100"`` -> ``(91, 100)``, with ``0 <= lo < hi``."""
    parts = str(text).split(":")
    try:
        lo, hi = (int(p) for p in parts)
    except ValueError:
        raise UsageError(f"{name} must be an inclusive count range like 1:10, got {text!r}") from None
    if hi <= lo or lo < 0:
        raise UsageError(f"{name} must be lo:hi with 0 <= lo < hi, got {text!r}")
    return lo, hi


def positive_int(text: str) -> int:
    """An argparse ``type=`` for integers >= 1 (argparse words the error and names the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def reword(exc: UsageError, names: dict[str, str]) -> UsageError:
    """Reword a numerics error in CLI terms: each config field name in ``names`` becomes its flag
    (``{"L": "--L"}`` turns ``L must be >= 1`` into ``--L must be >= 1``)."""
    import re

    text = str(exc)
    for field, flag in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"(?<![\w-]){re.escape(field)}(?![\w])", flag, text)
    return UsageError(text)


__all__ = ["OneLineParser", "HelpFormatter", "parse_float_list", "parse_int_list", "parse_window",
           "positive_int", "reword"]
