"""Checks of config fields that several toy experiments share, each a
:class:`~countlens.core.errors.ConfigError` naming the field it is about."""

from __future__ import annotations

import math
from typing import Any

from countlens.core.errors import ConfigError
from countlens.toy.constructions import validate


def int_tuple(values: Any, field: str, minimum: int) -> tuple[int, ...]:
    """``values`` as a non-empty tuple of ints, each ``>= minimum``."""
    out = tuple(int(v) for v in (values if isinstance(values, (list, tuple)) else [values]))
    if not out:
        raise ConfigError(field, f"{{{field}}} must not be empty")
    bad = [v for v in out if v < minimum]
    if bad:
        raise ConfigError(field, f"{{{field}}} values must be >= {minimum}, got {bad[0]}")
    return out


def positive_int(value: int, field: str) -> None:
    if int(value) < 1:
        raise ConfigError(field, f"{{{field}}} must be a positive integer, got {value}")


def score_scale(tau: float | None) -> None:
    """``tau``: ``None`` (``1/sqrt(d)``) or a positive finite score scale."""
    if tau is not None and not (math.isfinite(float(tau)) and float(tau) > 0):
        raise ConfigError("tau", f"{{tau}} must be a positive finite number (or unset: 1/sqrt(d)), got {tau}")


def need_dimension(d: int) -> None:
    """``d`` large enough for every variant's construction (LayerNorm needs two centred directions)."""
    validate("softmax-postln-bare", 1, d)


def known_variants(variants: tuple[str, ...], d: int, field: str = "variants") -> None:
    """Every name of ``variants`` a variant whose construction fits dimension ``d``."""
    for v in variants:
        try:
            validate(v, 1, d)
        except ConfigError as exc:
            raise (exc.under(field) if exc.field == "variant" else exc) from None


__all__ = ["int_tuple", "positive_int", "score_scale", "need_dimension", "known_variants"]
