"""The errors a user can cause, and the exit status they map to.

:class:`UsageError` is bad input in general; :class:`ConfigError` is a bad value of one (or more) config
fields and carries their names, so every command line can word it with *its own* flags (the dispatcher
asks the command's parser which flag sets the field: :func:`countlens.core.args.flag_for`), while the same
error raised from Python names the field (``steps must be >= 1, got 0``). No numerics module names a flag.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user. The CLI prints its message on one line and exits with :data:`EXIT_USAGE`.

    The message should name the fix (``choose an empty folder``), not the symptom.
    """


class _Name:
    """A field's name inside a :class:`ConfigError` message: ``{steps}`` is the name (``steps`` or
    ``--steps``); ``{template:plain}`` is the setting that fixes it (``template="plain"`` or
    ``--template plain``)."""

    def __init__(self, name: str, flag: bool):
        self.name, self.flag = name, flag

    def __format__(self, spec: str) -> str:
        if not spec:
            return self.name
        if self.flag:
            return f"{self.name} {spec}"
        value = spec if spec.lstrip("-").replace(".", "", 1).isdigit() else f'"{spec}"'
        return f"{self.name}={value}"


class ConfigError(UsageError):
    """A bad value of the config field ``field`` (and of ``also``, other fields the message names).

    ``template`` is the message with each field written as ``{field}``, and a fix as ``{field:value}``:

    >>> str(ConfigError("steps", "{steps} must be >= 1, got 0"))
    'steps must be >= 1, got 0'
    >>> ConfigError("template", "no chat template; pass {template:plain}").render(lambda f: "--" + f)
    'no chat template; pass --template plain'
    """

    def __init__(self, field: str, template: str, also: Sequence[str] = ()):
        self.field = field
        self.fields = (field, *tuple(also))
        self.template = template
        super().__init__(self.render())

    def __reduce__(self):  # an error raised in a worker process (a pool, a Ray actor) reaches the parent whole
        return (type(self), (self.field, self.template, self.fields[1:]))

    def render(self, flag: Callable[[str], str | None] | None = None) -> str:
        """The message with each field named by ``flag(field)`` (a command-line flag), or by the field
        itself where ``flag`` is ``None`` or returns ``None``."""
        names = {}
        for f in self.fields:
            shown = flag(f) if flag is not None else None
            names[f] = _Name(shown or f, shown is not None and shown.startswith("-"))
        return self.template.format(**names)

    def within(self, context: str) -> ConfigError:
        """The same error with ``context`` (plain text, e.g. ``model org/name``) before it."""
        return ConfigError(self.field, literal(context) + ": " + self.template, self.fields[1:])

    def under(self, field: str) -> ConfigError:
        """The same error about the field ``field`` of an enclosing config (a nested config's field is
        set through the enclosing one's, e.g. Table 3's ``attained_working_set`` through the training
        config's ``working_set``): every mention of the nested field becomes ``field``."""
        template = self.template.replace("{" + self.field, "{" + field)
        return ConfigError(field, template, self.fields[1:])


def literal(text: object) -> str:
    """``text`` as literal text inside a :class:`ConfigError` template (its braces doubled): a value the
    user gave, a file name, another error's message."""
    return str(text).replace("{", "{{").replace("}", "}}")


@contextlib.contextmanager
def about(field: str) -> Iterator[None]:
    """Inside the block, a :class:`UsageError` that names no config field becomes a :class:`ConfigError`
    about ``field`` (its message after the field's name): an input file that is missing or does not read, a
    location spec that names no location — a bad value of the field that holds it, so the command line
    names its flag. A :class:`ConfigError` passes unchanged."""
    try:
        yield
    except ConfigError:
        raise
    except UsageError as exc:
        raise ConfigError(field, "{" + field + "}: " + literal(exc)) from None


__all__ = ["EXIT_USAGE", "UsageError", "ConfigError", "literal", "about"]
