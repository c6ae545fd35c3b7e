"""countlens: how a transformer represents a count, and what that costs in parameter norm.

``import countlens as cl`` gives the main verbs (:mod:`countlens.pipeline.api`): ``cl.capture`` →
``cl.probe`` / ``cl.geometry`` / ``cl.compare``, ``cl.toy_capture`` for the toy's representations beside an LLM's,
``cl.config`` and ``cl.run`` for any experiment at a size preset (``quick``, ``full``, ``test``); each result
has ``.plot()`` and ``.save(folder)``. They are imported on first use, so ``countlens toy ...`` stays quick.

Subpackages: ``countlens.toy`` (one attention layer counting, exactly), ``countlens.llm`` (capture the
residual stream of a chat model at the assistant boundary, and the causal experiments on it),
``countlens.probes`` (ridge probes), ``countlens.analysis`` (geometry, the toy-vs-LLM comparison), and the
floors below and above them: ``countlens.core`` and ``countlens.pipeline``.
"""

__version__ = "0.1.0"

# The API's verbs, resolved lazily from countlens.pipeline.api.
API = ("capture", "probe", "sweep", "geometry", "toy_capture", "compare", "config", "run")


def __getattr__(name: str):
    if name in API:
        from countlens.pipeline import api

        return getattr(api, name)
    if name == "Capture":
        from countlens.core.capture import Capture

        return Capture
    raise AttributeError(f"module 'countlens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API, "Capture"])


__all__ = ["__version__", *API, "Capture"]
