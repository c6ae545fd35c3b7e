"""What every room's command line shares: the one-line-error parser, the help formatter, the parsers for
lists, ranges and count windows, and :func:`flag_for`, which words a config field as a command's own flag.

These turn text into values and raise :class:`~countlens.core.errors.UsageError` naming the flag; the
numerics never see a flag name: they raise :class:`~countlens.core.errors.ConfigError` naming the config
field, and the dispatcher words it with the flag of the command that ran (:func:`cli_message`).
"""

from __future__ import annotations

import argparse

from countlens.core.errors import EXIT_USAGE, ConfigError, UsageError


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the fix, with exit status 2. Every parser records
    itself as ``args._parser``; the deepest subcommand's wins, so the dispatcher knows the flags of the
    command that ran (:func:`cli_message`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.set_defaults(_parser=self)

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


def flag_for(parser: argparse.ArgumentParser | None, field: str) -> str | None:
    """The option of ``parser`` that sets the config field ``field`` (an option whose ``dest`` is the
    field; its long form), or ``None`` when the command has none."""
    if parser is None:
        return None
    for action in parser._actions:
        if action.dest == field and action.option_strings:
            return max(action.option_strings, key=len)
    return None


def cli_message(exc: UsageError, parser: argparse.ArgumentParser | None) -> str:
    """A usage error as the command line shows it: a :class:`ConfigError`'s fields named by the flags of
    ``parser`` that set them (the field itself where the command has no such flag)."""
    if isinstance(exc, ConfigError):
        return exc.render(lambda field: flag_for(parser, field))
    return str(exc)


__all__ = ["OneLineParser", "HelpFormatter", "parse_float_list", "parse_int_list", "parse_window",
           "positive_int", "flag_for", "cli_message"]

