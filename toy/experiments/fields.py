"""The toy's own field checks, which need its constructions (each a :class:`~countlens.core.errors.ConfigError`
naming the field it is about); the general ones (``AtLeast``, ``Ints``, ...) are :mod:`countlens.core.fields`."""

from __future__ import annotations

import math

from countlens.core.errors import ConfigError
from countlens.toy.constructions import validate


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


__all__ = ["score_scale", "need_dimension", "known_variants"]
