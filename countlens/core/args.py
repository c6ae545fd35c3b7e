"""What every room's command line shares: the one-line-error parser, the help formatter, the parsers for
lists, ranges and count windows, and :func:`flag_for`, which words a config field as a command's own flag.

These turn text into values and raise :class:`~countlens.core.errors.ConfigError` naming the config field
the text sets (a parser never names a flag), and the dispatcher words it with the flag of the command that
ran (:func:`cli_message`); the config then checks the values (:mod:`countlens.core.fields`). The options
several commands share are declared once (:data:`COMMON_OPTIONS`).

A command's options are its config's fields (:func:`add_config_options`, in the manner of tyro): each field's
flag, type, default, shown choices and help (the string written under the field) are derived, and the
command declares only what differs (:class:`Option`: an alias, a parser, a required input) and what is no
field (its output folder); :func:`config_values` reads the given values back as settings by name.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from countlens.core.errors import EXIT_USAGE, ConfigError, UsageError, literal
from countlens.core.fields import (
    AtLeast,
    OneOf,
    Optional,
    Window,
    field_default,
    field_doc,
    field_owner,
    field_rule,
)


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
    "threads": {"flag": "--threads", "type": int, "default": 1, "rule": AtLeast(1),
                "help": "torch intra-op and BLAS threads: on these small tensors and matrices extra threads mostly "
                        "spin (BENCHMARKS.md)"},
}


# What ``--quiet`` says on a command with nothing to hide (geometry, compare, diagnose): taken, as on the commands
# beside it, and said to do nothing.
NOTHING_TO_HIDE = "no effect here: this command shows no progress bars and loads no model (default: off)"


def add_common_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *names: str,
                       helps: dict[str, str] | None = None, **defaults) -> None:
    """Add the shared options ``names`` (keys of :data:`COMMON_OPTIONS`; each option's ``dest`` is its name)
    to ``parser``; ``defaults`` replaces an option's default for this command, ``helps`` its help text."""
    for name in names:
        spec = dict(COMMON_OPTIONS[name])
        flag, rule = spec.pop("flag"), spec.pop("rule", None)
        if name in defaults:
            spec["default"] = defaults[name]
        if name in (helps or {}):
            spec["help"] = helps[name]
        if name == "threads" and spec.get("default") is None:
            spec["help"] += " (default: torch's own count, one per core)"
        parser.add_argument(flag, dest=name, **spec).rule = rule  # what a value must be (the tests' bad values)


# --- options derived from a config's fields ------------------------------------------------------------


def names_list(text: str, field: str = "") -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]`` (the config checks the names)."""
    return [c.strip() for c in str(text).split(",") if c.strip()]


def numbers_text(values) -> str:
    """A list of numbers as :func:`parse_float_list` reads it back (``10,30,100``)."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


@dataclass(frozen=True)
class Option:
    """How a command line sets one config setting ``dest`` (a field of the config, or of a config it holds).

    Everything left ``None`` is derived from the field (:func:`derived`): the flag is ``dest`` with dashes
    (``alias`` replaces it), the help the field's documentation (a ``{setting}`` in it is written as that
    option's flag), the value's parsing and shown text from the field's type (``int``, ``float``, ``bool``: a
    switch, lists of ints in the one integer-list grammar, of numbers or names comma-separated), the choices
    shown (``metavar``) from its ``FIELDS`` rule (:class:`~countlens.core.fields.OneOf`; the config checks
    them, in the one wording), ``required`` from a field without a default, the default from the config.
    ``parse(text, dest)`` turns the option's text into the setting's value (a :class:`ConfigError` naming
    ``dest`` on bad text), ``text(value)`` a value into the option's text (its shown default); ``type`` and
    ``choices`` go to argparse (which then words a bad value itself); ``default`` is a command's own default,
    given whether or not the other options are left unset."""

    dest: str
    help: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    switch: bool | None = None
    parse: Callable[[str, str], Any] | None = None
    text: Callable[[Any], Any] | None = None
    alias: str | None = None
    required: bool | None = None
    default: Any = None
    metavar: str | None = None
    rule: Any = None

    @property
    def flag(self) -> str:
        return self.alias or "--" + self.dest.replace("_", "-")

    def worded(self, flags: Mapping[str, str] | None = None) -> str:
        """The help text with each ``{setting}`` written as the flag that sets it (``flags``: by setting; an
        unknown one as ``--setting``)."""
        return re.sub(r"\{(\w+)\}", lambda m: (flags or {}).get(m[1]) or "--" + m[1].replace("_", "-"),
                      (self.help or "").replace("%", "%%"))

    def shown(self, value: Any) -> Any:
        """``value`` as the option's text."""
        return self.text(value) if self.text is not None else value

    def value(self, given: Any) -> Any:
        """The setting's value for the option's ``given`` value (text parsed)."""
        return self.parse(given, self.dest) if self.parse is not None and isinstance(given, str) else given


def _annotation(field: dataclasses.Field) -> str:
    """A field's type as written, without ``| None``: ``"int"``, ``"tuple[int, ...]"``."""
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    text = re.sub(r"^Optional\[(.*)\]$", r"\1", text.replace(" ", ""))
    return re.sub(r"\|None$|^None\|", "", text)


_SCALARS = {"int": int, "float": float}
_LISTS = {"int": (parse_int_list, ints_text), "float": (parse_float_list, numbers_text), "str": (names_list, ",".join)}


def derived(config_type: type, name: str, given: Option | None = None) -> Option:
    """The option that sets the setting ``name`` of ``config_type``: what ``given`` says, the rest derived
    from the field (see :class:`Option`)."""
    owner, field = field_owner(config_type, name)
    kind = _annotation(field)
    rule = field_rule(config_type, name)
    choice = rule.rule if isinstance(rule, Optional) else rule
    found: dict[str, Any] = {"help": field_doc(config_type, name), "rule": rule,
                             "required": field.default is dataclasses.MISSING
                             and field.default_factory is dataclasses.MISSING}
    listed = re.fullmatch(r"(?:tuple|list|Sequence)\[(\w+)(?:,\.\.\.)?\]", kind)
    if kind == "bool":
        found["switch"] = True
    elif kind in _SCALARS:
        found["type"] = _SCALARS[kind]
    elif listed and listed[1] in _LISTS:
        parse, text = _LISTS[listed[1]]
        found["text"] = lambda v: None if v is None else text(v)
        found["parse"] = (lambda t, f: tuple(parse(t, f))) if kind.startswith("tuple") else parse
    if isinstance(choice, Window):  # an inclusive count window, written lo:hi
        found["parse"], found["text"] = parse_window, lambda v: None if v is None else f"{v[0]}:{v[1]}"
    if isinstance(choice, OneOf) and kind == "str":  # shown as argparse would; the config checks (its wording)
        found["metavar"] = "{" + ",".join(map(str, choice.choices)) + "}"
    # (not dataclasses.asdict, which would turn a rule, itself a dataclass, into a dict)
    mine = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)
            if getattr(given, f.name) is not None} if given else {}
    return dataclasses.replace(Option(dest=name), **{**found, **mine})


def add_config_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, config: Any,
                       names: Sequence[str] | None = None, *, options: Mapping[str, Option] | None = None,
                       unset: bool = False, alternate: tuple[str, Any] | None = None,
                       helps: Mapping[str, str] | None = None, default_text: str | None = None,
                       when: str | None = None, inherit: bool = False) -> list[argparse.Action]:
    """Add an option for each setting ``names`` of the config ``config`` (every field, when ``None``) to
    ``parser``: derived from the field (:func:`derived`) over what ``options`` declares for it (an alias, a
    parser, a help another command shares); ``helps`` replaces a help for this command alone.

    ``config``: a config whose settings are the defaults, or a config type whose field defaults they are
    (one that cannot be built without its required fields). ``unset``: every option's value stays ``None``
    unless given (a preset or a ``--full`` decides), its help naming the config's default — and
    ``alternate`` (``("--full", Config.paper())``) the other sizes' where they differ, or ``default_text``
    in their place (``"the preset's"``, where a ``--preset`` of several decides); ``when``: the options
    apply in one mode of the command alone, which their shown default names first (``(--positions
    boundary; default: 3)``); ``inherit``: a subcommand's options that its parent command has too (``probe
    --seeds 0 sweep``): a value given to the parent stays unless given again here (argparse's ``SUPPRESS``),
    the help naming the default as with ``unset``. A switch whose flag is ``--no-<setting>`` (an ``alias``) turns
    its setting off. Each action carries
    its :class:`Option` (``action.option``), which :func:`config_values` reads back, and its field's rule
    (``action.rule``, as a shared option does: a test writes a value it refuses)."""
    config_type = config if isinstance(config, type) else type(config)
    names = [f.name for f in dataclasses.fields(config_type)] if names is None else names
    made = {n: derived(config_type, n, (options or {}).get(n)) for n in names}
    flags = {n: o.flag for n, o in made.items()}
    actions = []
    for name, option in made.items():
        text = (helps or {}).get(name) or option.worded({**{k: v.flag for k, v in (options or {}).items()},
                                                         **flags})
        default = option.default if option.default is not None else None if option.required else (
            field_default(config_type, name) if isinstance(config, type) else _value_of(config, name))
        # a command's own default is given whatever ``unset`` says
        given = None if option.default is None else option.shown(option.default)
        if option.switch:
            # a setting on by default, turned off by its flag (``--no-standardize`` for ``standardize``); a
            # setting named for the negation itself (``no_cache``'s ``--no-cache``) is turned on by it
            off = option.flag == "--no-" + name.replace("_", "-")
            action = parser.add_argument(option.flag, dest=name, action="store_false" if off else "store_true",
                                         default=argparse.SUPPRESS if inherit else
                                         None if unset and given is None else bool(default), help=text)
        else:
            if unset or inherit or option.parse is not None:
                shown = f"(default: {default_text})" if unset and default_text and not option.required \
                    else _shown_default(option, default, alternate)
                if when:
                    shown = f"({when}; {shown[1:]}" if shown else f"({when})"
                text = text if shown is None or "(default" in text else f"{text} {shown}"
            action = parser.add_argument(option.flag, dest=name, type=option.type, choices=option.choices,
                                         required=bool(option.required), metavar=option.metavar,
                                         default=argparse.SUPPRESS if inherit else given if unset
                                         else option.shown(default), help=text)
        action.option, action.rule = option, option.rule  # type: ignore[attr-defined]
        actions.append(action)
    return actions


def _value_of(config: Any, name: str) -> Any:
    from countlens.core.options import option_value

    return option_value(config, name)


def _shown_default(option: Option, default: Any, alternate: tuple[str, Any] | None) -> str | None:
    """``(default: X)`` (``; --full: Y`` where the alternate config's value differs), ``None`` for none."""
    if default is None or option.required:
        return None
    text = f"(default: {option.shown(default)}"
    if alternate is not None:
        other = _value_of(alternate[1], option.dest)
        if other != default:
            text += f"; {alternate[0]}: {option.shown(other)}"
    return text + ")"


def config_values(args: argparse.Namespace, config: Any = None) -> dict[str, Any]:
    """The settings the derived options of the command that ran (:func:`add_config_options`) were given, by
    name and parsed to their values; options left ``None`` are left out. ``config``: only the settings of
    this config (type), e.g. the training half of ``toy train``'s options."""
    parser = getattr(args, "_parser", None)
    values = {}
    for action in getattr(parser, "_actions", ()):
        option = getattr(action, "option", None)
        given = getattr(args, action.dest, None)
        if option is None or given is None:
            continue
        if config is not None:
            try:
                field_owner(config if isinstance(config, type) else type(config), option.dest)
            except AttributeError:
                continue
        values[option.dest] = option.value(given)
    return values


def threaded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run ``command`` with at most ``--threads`` torch intra-op and BLAS threads (checked ``>= 1``; unset:
    the process's own), restoring the previous counts after it."""
    from countlens.core.threads import blas_threads, torch_threads

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        threads = getattr(args, "threads", None)
        if threads is not None:
            AtLeast(1)(threads, "threads")
        with torch_threads(threads), blas_threads(threads):
            return command(args)

    return run


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
           "parse_window", "positive_int", "COMMON_OPTIONS", "NOTHING_TO_HIDE", "add_common_options", "names_list",
           "numbers_text", "Option", "derived", "add_config_options", "config_values", "threaded", "also_sets",
           "flag_for", "cli_message"]

