"""Silence transformers' loading bars and advisory warnings, once it is imported (never importing it)."""

from __future__ import annotations

import sys

_QUIET = {"asked": False, "done": False}


def quiet_transformers() -> None:
    """Silence transformers' loading bars and advisory warnings (they would bury progress bars and errors).
    Applied when transformers is first used here, so that a command refused before any model is read never
    pays for importing it."""
    _QUIET["asked"] = True
    if "transformers" in sys.modules:
        _apply_quiet()


def _apply_quiet() -> None:
    if _QUIET["asked"] and not _QUIET["done"]:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        _QUIET["done"] = True


__all__ = ["quiet_transformers"]
