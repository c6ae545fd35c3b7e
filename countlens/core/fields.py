"""What a config field may hold, declared once beside the config and worded the same everywhere.

In the spirit of scikit-learn's ``validate_params``: a config lists its fields' rules as data
(``FIELDS = {"batch_size": AtLeast(1), "backend": OneOf(BACKENDS), "seeds": Ints(minimum=0)}``) and checks
them when it is built (``__post_init__`` calls :func:`check_fields`); each rule raises a
:class:`~countlens.core.errors.ConfigError` naming the field (``batch_size must be >= 1, got 0``), which a
command line words with its own flag. Rules read no file and load nothing: a preset config is built at
import time with paths that only exist inside a report folder.

A rule is a callable ``rule(value, field) -> value``: it returns the value it accepts, normalised (a list
of ints as a tuple), so configs that keep their fields normalised (the toy's, the probes') assign it back.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from countlens.core.errors import ConfigError, literal

Rule = Callable[[Any, str], Any]


def _shown(value: Any) -> str:
    """A value as a message shows it (braces escaped: it is user text inside a template)."""
    return literal(repr(value) if isinstance(value, str) else value)


def _int(value: Any, field: str) -> int:
    """``value`` as an int (a float only when whole); ``ConfigError`` naming ``field`` otherwise."""
    if isinstance(value, bool):
        raise ConfigError(field, f"{{{field}}} must be a whole number, got {_shown(value)}")
    try:
        number = int(value)
        whole = float(value) == number
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(field, f"{{{field}}} must be a whole number, got {_shown(value)}") from None
    if not whole:
        raise ConfigError(field, f"{{{field}}} must be a whole number, got {_shown(value)}")
    return number


def _float(value: Any, field: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(field, f"{{{field}}} must be a number, got {_shown(value)}") from None


def _sequence(values: Any) -> list[Any]:
    """A scalar as a one-element list; strings are scalars."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        return [values]
    return list(values)


@dataclass(frozen=True)
class AtLeast:
    """A whole number ``>= minimum`` (``batch_size must be >= 1, got 0``)."""

    minimum: int = 1
    note: str = ""  # said after the bound, e.g. " (0: never)"

    def __call__(self, value: Any, field: str) -> int:
        number = _int(value, field)
        if number < self.minimum:
            raise ConfigError(field, f"{{{field}}} must be >= {self.minimum}{literal(self.note)}, got {number}")
        return number


@dataclass(frozen=True)
class Positive:
    """A finite number ``> 0`` (or ``>= 0`` with ``zero=True``), in ``unit`` (``lr must be a positive finite
    number, got -1``)."""

    unit: str = ""
    zero: bool = False

    def __call__(self, value: Any, field: str) -> float:
        number = _float(value, field)
        ok = math.isfinite(number) and (number >= 0 if self.zero else number > 0)
        if not ok:
            unit = f" ({self.unit})" if self.unit else ""
            what = "a finite number >= 0" if self.zero else "a positive finite number"
            raise ConfigError(field, f"{{{field}}} must be {what}{literal(unit)}, got {_shown(value)}")
        return value


@dataclass(frozen=True)
class OneOf:
    """One of ``choices`` (``backend must be one of hf, transformer-lens, got 'jax'``)."""

    choices: tuple[str, ...]

    def __call__(self, value: Any, field: str) -> Any:
        if value not in self.choices:
            raise ConfigError(field, f"{{{field}}} must be one of {literal(', '.join(map(str, self.choices)))}, got "
                                     f"{_shown(value)}")
        return value


@dataclass(frozen=True)
class Ints:
    """A non-empty list of whole numbers, each ``>= minimum`` (``None``: any), distinct with ``distinct``;
    returned as a tuple (``seeds values must be >= 0, got -1``)."""

    minimum: int | None = None
    distinct: bool = False

    def __call__(self, values: Any, field: str) -> tuple[int, ...]:
        try:
            out = tuple(_int(v, field) for v in _sequence(values))
        except ConfigError:
            raise ConfigError(field, f"{{{field}}} must be whole numbers, got {_shown(values)}") from None
        if not out:
            raise ConfigError(field, f"{{{field}}} must not be empty")
        if self.minimum is not None and min(out) < self.minimum:
            raise ConfigError(field, f"{{{field}}} values must be >= {self.minimum}, got {min(out)}")
        if self.distinct and len(set(out)) != len(out):
            raise ConfigError(field, f"{{{field}}} holds a repeated value; list each once")
        return out


@dataclass(frozen=True)
class Numbers:
    """A non-empty list of finite numbers, each ``> 0`` (``positive``) or ``>= 0`` (``nonnegative``);
    returned as a tuple (``alphas must be finite and >= 0, got [-1.0]``)."""

    positive: bool = False
    nonnegative: bool = False

    def __call__(self, values: Any, field: str) -> tuple[float, ...]:
        try:
            out = tuple(_float(v, field) for v in _sequence(values))
        except ConfigError:
            raise ConfigError(field, f"{{{field}}} must be numbers, got {_shown(values)}") from None
        if not out:
            raise ConfigError(field, f"{{{field}}} must not be empty")
        bound = " and > 0" if self.positive else " and >= 0" if self.nonnegative else ""
        bad = [v for v in out if not math.isfinite(v) or (self.positive and v <= 0) or (self.nonnegative and v < 0)]
        if bad:
            raise ConfigError(field, f"{{{field}}} must be finite{bound}, got {literal(list(out))}")
        return out


@dataclass(frozen=True)
class Window:
    """An inclusive count window ``(lo, hi)`` with ``0 <= lo < hi`` (``low must be lo:hi with 0 <= lo < hi``)."""

    def __call__(self, value: Any, field: str) -> tuple[int, int]:
        try:
            lo, hi = (int(v) for v in value)
        except (TypeError, ValueError):
            raise ConfigError(field, f"{{{field}}} must be two counts lo, hi, got {_shown(value)}") from None
        if hi <= lo or lo < 0:
            raise ConfigError(field, f"{{{field}}} must be lo:hi with 0 <= lo < hi, got {lo}:{hi}")
        return lo, hi


@dataclass(frozen=True)
class Fractions:
    """Three fractions: train, validation, test, each ``>= 0``, test ``> 0``, summing to at most 1."""

    def __call__(self, values: Any, field: str) -> tuple[float, float, float]:
        out = tuple(_float(v, field) for v in _sequence(values))
        if len(out) != 3 or out[2] <= 0:
            raise ConfigError(field, f"{{{field}}} must be three fractions (train, validation, test) with test > 0, "
                                     f"got {literal(list(out))}")
        return out  # type: ignore[return-value]


@dataclass(frozen=True)
class Text:
    """A non-empty string (``acts must name a capture folder``): ``what`` says what it names."""

    what: str

    def __call__(self, value: Any, field: str) -> Any:
        if value is None or not str(value).strip():
            raise ConfigError(field, f"{{{field}}} must name {literal(self.what)}")
        return value


@dataclass(frozen=True)
class Optional:
    """``None``, or a value ``rule`` accepts."""

    rule: Rule

    def __call__(self, value: Any, field: str) -> Any:
        return None if value is None else self.rule(value, field)


@dataclass(frozen=True)
class Checked:
    """A value ``check(value)`` accepts: a room's own check of one kind of value (a device name), which raises
    the :class:`ConfigError` itself."""

    check: Callable[[Any], None]

    def __call__(self, value: Any, field: str) -> Any:
        self.check(value)
        return value


@dataclass(frozen=True)
class Nested:
    """A config of type ``kind`` held by another (``model``: a ``ModelSpec``); a plain value becomes
    ``kind(**{coerce: value})`` where ``coerce`` names the field a plain value sets (``model="org/x"``)."""

    kind: type
    coerce: str | None = None

    def __call__(self, value: Any, field: str) -> Any:
        if isinstance(value, self.kind):
            return value
        if self.coerce is not None and isinstance(value, str):
            return self.kind(**{self.coerce: value})
        raise ConfigError(field, f"{{{field}}} must be a {literal(self.kind.__name__)}, got {_shown(value)}")


def check_fields(config: Any, rules: Mapping[str, Rule], assign: bool = False) -> None:
    """Check every field of ``config`` named in ``rules`` (in their order) with its rule; with ``assign`` the
    normalised value replaces the field's (frozen dataclasses too)."""
    for name, rule in rules.items():
        value = rule(getattr(config, name), name)
        if assign:
            object.__setattr__(config, name, value)


def field_default(config_type: type, name: str) -> Any:
    """The default of the field ``name`` of the dataclass ``config_type`` (or of a config it holds by
    default: ``field_default(CaptureConfig, "device")``), without building the config: a config whose
    required fields have no usable default (``LensConfig``'s ``acts``) still shows its defaults in help."""
    for f in dataclasses.fields(config_type):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if f.name == name and not dataclasses.is_dataclass(default):
            if default is dataclasses.MISSING:
                raise AttributeError(f"{config_type.__name__}.{name} has no default")
            return default
        if dataclasses.is_dataclass(default):
            try:
                return field_default(type(default), name)
            except AttributeError:
                continue
    raise AttributeError(f"{config_type.__name__} has no setting {name!r}")


def field_owner(config_type: type, name: str) -> tuple[type, dataclasses.Field]:
    """The dataclass that declares the setting ``name`` of ``config_type`` (itself, or a config it holds by
    default: ``field_owner(CaptureConfig, "device")`` is ``ModelSpec``'s field) and that field."""
    nested = []
    for f in dataclasses.fields(config_type):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if dataclasses.is_dataclass(default):
            nested.append(type(default))
        elif f.name == name:
            return config_type, f
    for kind in nested:
        try:
            return field_owner(kind, name)
        except AttributeError:
            continue
    raise AttributeError(f"{config_type.__name__} has no setting {name!r}")


def field_rule(config_type: type, name: str) -> Rule | None:
    """The rule the ``FIELDS`` of the dataclass declaring ``name`` gives it (``None``: none declared)."""
    owner, _ = field_owner(config_type, name)
    return (getattr(owner, "FIELDS", None) or {}).get(name)


@functools.cache
def _module_docs(module: str) -> dict[str, dict[str, str]]:
    """Per class of ``module`` (by name, nested classes too), its fields' documentation."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return {}
    docs: dict[str, dict[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            mine = docs.setdefault(node.name, {})
            for stmt, after in zip(node.body, node.body[1:], strict=False):
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                        and isinstance(after.value.value, str)):
                    mine[stmt.target.id] = " ".join(after.value.value.split())
    return docs


def field_doc(config_type: type, name: str) -> str | None:
    """The documentation of the setting ``name`` of ``config_type``: the string written under the field, as
    tyro and Sphinx read it (``d: int = 16``, then the line ``"model dimension"``); a subclass's
    documentation of a field it inherits wins. ``None`` where the field has none."""
    owner, _ = field_owner(config_type, name)
    for kind in (config_type, *config_type.__mro__[1:], owner, *owner.__mro__[1:]):
        text = _module_docs(kind.__module__).get(kind.__name__, {}).get(name)
        if text:
            return text
    return None


__all__ = ["Rule", "AtLeast", "Positive", "OneOf", "Ints", "Numbers", "Window", "Fractions", "Text", "Optional",
           "Checked", "Nested", "check_fields", "field_default", "field_owner", "field_rule", "field_doc"]
