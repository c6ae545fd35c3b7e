"""What every room's command line shares: the one-line-error parser, the help formatter, the parsers for
lists, ranges and count windows, and :func:`flag_for`, which words a config field as a command's own flag.

These turn text into values and raise :class:`~countlens.core.errors.ConfigError` naming the config field
the text sets (a parser never names a flag), and the dispatcher words it with the flag of the command that
ran (:func:`cli_message`); the config then checks the values (:mod:`countlens.core.fields`). The options
several commands share are declared once (:data:`COMMON_OPTIONS`).
"""

from __future__ import annotations

import argparse

from countlens.core.errors import EXIT_USAGE, ConfigError, UsageError, literal


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


def parse_float_list(text: str, field: str) -> list[float]:
    """Parse ``"10,30,100"`` into floats; :class:`ConfigError` naming the config field ``field`` on bad input."""
    try:
        values = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ConfigError(field, f"{{{field}}} must be a comma-separated list of numbers, got {literal(repr(text))}"
                          ) from None
    if not values:
        raise ConfigError(field, f"{{{field}}} must not be empty")
    return values


INT_LIST = "integers and inclusive ranges with an optional step, like 0:10,12,20:30:5"


def parse_int_list(text: str, field: str, sort: bool = False) -> list[int]:
    """The one grammar of integer lists: comma-separated parts, each an integer ``12``, an inclusive range
    ``0:10`` or an inclusive range with a step ``20:30:5`` (``"0:10,12,20:30:5"``); the values in the order
    written, or sorted and each once with ``sort`` (a set of counts). :class:`ConfigError` naming the config
    field ``field`` on bad input (a reversed range, a step below 1, no values)."""
    values: list[int] = []
    try:
        for part in (p.strip() for p in str(text).split(",")):
            if not part:
                continue
            bounds = [int(v) for v in part.split(":")]
            if len(bounds) == 1:
                values.append(bounds[0])
                continue
            if len(bounds) > 3:
                raise ValueError
            lo, hi, step = (*bounds, 1) if len(bounds) == 2 else bounds
            if hi < lo or step < 1:
                raise ValueError
            values.extend(range(lo, hi + 1, step))
    except ValueError:
        raise ConfigError(field, f"{{{field}}} takes {INT_LIST}, got {literal(repr(text))}") from None
    if not values:
        raise ConfigError(field, f"{{{field}}} must not be empty")
    return sorted(set(values)) if sort else values


def ints_text(values) -> str:
    """A list of ints as :func:`parse_int_list` reads it back: ``[0, 1, ..., 100]`` -> ``"0:100"``, other
    lists comma-separated (a help text's default)."""
    values = [int(v) for v in values]
    if len(values) > 3 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}:{values[-1]}"
    return ",".join(str(v) for v in values)


def parse_window(text: str, field: str) -> tuple[int, int]:
    """An inclusive count window: ``"91:100"`` -> ``(91, 100)``; its bounds are the config's to check
    (:class:`countlens.core.fields.Window`). :class:`ConfigError` naming ``field`` for text that is no
    ``lo:hi``."""
    parts = str(text).split(":")
    try:
        lo, hi = (int(p) for p in parts)
    except ValueError:
        raise ConfigError(field, f"{{{field}}} must be an inclusive count range like 1:10, got {literal(repr(text))}"
                          ) from None
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


# The options several commands share, declared once: the same flag, help and behaviour on every command that
# takes them (its default shown; a command passes its own where one differs).
COMMON_OPTIONS: dict[str, dict] = {
    "quiet": {"flag": "--quiet", "action": "store_true",
              "help": "hide progress bars and model-loading messages (default: shown)"},
    "threads": {"flag": "--threads", "type": int, "default": 1,
                "help": "torch intra-op and BLAS threads: on these small tensors and matrices extra threads mostly "
                        "spin (BENCHMARKS.md)"},
}


def add_common_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *names: str,
                       **defaults) -> None:
    """Add the shared options ``names`` (keys of :data:`COMMON_OPTIONS`; each option's ``dest`` is its name)
    to ``parser``; ``defaults`` replaces an option's default for this command."""
    for name in names:
        spec = dict(COMMON_OPTIONS[name])
        flag = spec.pop("flag")
        if name in defaults:
            spec["default"] = defaults[name]
        parser.add_argument(flag, dest=name, **spec)


def also_sets(parser: argparse.ArgumentParser, **fields: str) -> None:
    """Record that an option of ``parser`` sets config fields besides its own ``dest``: ``also_sets(p,
    model="models")`` says ``--models`` sets each run's ``model``, so an error about ``model`` names
    ``--models``."""
    parser.set_defaults(_also_sets={**(parser.get_default("_also_sets") or {}), **fields})


def flag_for(parser: argparse.ArgumentParser | None, field: str) -> str | None:
    """The option of ``parser`` that sets the config field ``field`` (an option whose ``dest`` is the
    field, or that :func:`also_sets` it; its long form), or ``None`` when the command has none."""
    if parser is None:
        return None
    dest = (parser.get_default("_also_sets") or {}).get(field, field)
    for action in parser._actions:
        if action.dest == dest and action.option_strings:
            return max(action.option_strings, key=len)
    return None


def cli_message(exc: UsageError, parser: argparse.ArgumentParser | None) -> str:
    """A usage error as the command line shows it: a :class:`ConfigError`'s fields named by the flags of
    ``parser`` that set them (the field itself where the command has no such flag)."""
    if isinstance(exc, ConfigError):
        return exc.render(lambda field: flag_for(parser, field))
    return str(exc)


__all__ = ["OneLineParser", "HelpFormatter", "parse_float_list", "INT_LIST", "parse_int_list", "ints_text",
           "parse_window", "positive_int", "COMMON_OPTIONS", "add_common_options", "also_sets", "flag_for", "cli_message"]

