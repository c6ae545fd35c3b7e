"""Load once per run: a :class:`ModelPool` holds what one run has resolved, read and loaded.

Within a run (:func:`model_pool`: ``reproduce``, ``study``) every model is resolved once, its tokenizer and
config read once (:func:`read_once`, also a capture's plan) and its weights loaded once, however many stages
use it; the pool releases the weights when the run (or, in a study, the model's turn) ends. The pool is
handed on, never global: every reader of :mod:`countlens.llm.models` and every experiment's plan and run take
it as ``pool=`` (``reproduce``'s stages are handed it when their run takes one), and without one they read
afresh.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from typing import Any


class ModelPool:
    """What one run has read, so that it reads each thing once: resolutions (``refs``), tokenizers and
    configs (``reads``), and loaded models (``models``, by reference, device and dtype).

    Made by :func:`model_pool` and handed on by whoever runs several things with one model (``reproduce``
    hands it to each stage's model, ``study`` to each model's ``reproduce``): the readers of
    :mod:`countlens.llm.models` take it as ``pool=``. :meth:`loaded` hands a stage the model of a
    :class:`ModelSpec` (its ``loaded=``). :meth:`release_models` drops the weights (a study does, before its next model
    loads); the resolutions and tokenizers, small, stay for the run.
    """

    def __init__(self) -> None:
        self.refs: dict[tuple, Any] = {}  # ModelRef by resolve_model's arguments
        self.reads: dict[tuple, Any] = {}
        self.models: dict[tuple, Any] = {}  # LoadedModel by (reference, device, dtype)

    def loaded(self, spec, progress: bool = True):
        """The :class:`~countlens.llm.models.LoadedModel` of ``spec`` (a :class:`~countlens.llm.models.ModelSpec`),
        loaded on its first request in this pool."""
        return spec.load(progress, pool=self)

    def release_models(self) -> None:
        """Drop every loaded model (and give their memory back)."""
        self.models.clear()
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def release(self) -> None:
        self.refs.clear()
        self.reads.clear()
        self.release_models()


@contextlib.contextmanager
def model_pool() -> Iterator[ModelPool]:
    """A new :class:`ModelPool` for the ``with`` block, to hand on as ``pool=``: every model is resolved,
    read and loaded once in it; leaving the block releases everything."""
    pool = ModelPool()
    try:
        yield pool
    finally:
        pool.release()


def read_once(kind: str, key: Any, make, pool: ModelPool | None = None):
    """``make()``, once per ``(kind, key)`` in ``pool`` (every time without one): what a run reads or checks
    before it loads weights (a tokenizer, a config, a capture's plan)."""
    if pool is None:
        return make()
    key = (kind, key)
    if key not in pool.reads:
        pool.reads[key] = make()
    return pool.reads[key]


__all__ = ["ModelPool", "model_pool", "read_once"]
