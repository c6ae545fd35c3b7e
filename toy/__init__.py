"""The toy theory: one attention layer counting up to L, exactly and checkably (SPEC §1)."""

from countlens.toy.model import VARIANTS, ToyConfig, ToyParams  # noqa: F401
