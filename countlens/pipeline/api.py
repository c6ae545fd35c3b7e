"""The Python API: the main verbs for a notebook, each a few lines over the experiments the report runs.

``import countlens as cl`` gives them::

    cap = cl.capture("default", preset="test")   # a Capture: folder, typed metadata, rows, acts(location)
    probes = cl.probe(cap)                        # a ProbeResult; .plot() is Figure 7, .save(folder) its files
    cl.geometry(cap, preset="test").plot()        # Figure 5
    cl.geometry(cl.toy_capture("softmax", L=12, d=4), preset="test").plot()   # the toy beside it

Every verb takes the settings of its experiment's config by name (``cl.capture("default", counts=[1, 2, 3])``
sets ``config.prompts.counts``; a wrong name or value is one :class:`~countlens.core.errors.ConfigError`
naming the field) on top of a size preset: ``quick`` (``make demo``), ``full`` (the paper's) or ``test``
(seconds). :func:`config` shows what a preset holds and :func:`run` runs any declared experiment. Results
are the objects the report saves: ``.save(folder)`` writes the same files, ``.plot()`` draws the figure.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError
from countlens.core.io import config_digest
from countlens.core.options import option_value, with_options
from countlens.core.results import config_record
from countlens.pipeline.experiments import SOURCE, by_name, check_preset, preset_config

CAPTURES = "captures"  # where cl.capture keeps its folders inside the countlens cache, by config digest
TOYS = "toy-acts"


def _settings(config: Any, settings: dict[str, Any]) -> Any:
    """``config`` with ``settings`` set by name (nested configs included); an unknown name is a
    :class:`ConfigError` naming it."""
    if not settings:
        return config
    for name in settings:
        try:
            option_value(config, name)
        except AttributeError:
            known = ", ".join(sorted(f.name for f in dataclasses.fields(config)))
            raise ConfigError(name, f"{type(config).__name__} has no setting {{{name}}}; its fields: {known}") from None
    return with_options(config, **settings)


def _folder(capture: Any) -> str:
    """The activation folder of a :class:`~countlens.core.capture.Capture`, a capture result or a path."""
    return str(getattr(capture, "folder", capture))


def _cache_root() -> Path:
    from countlens.llm.models import cache_root

    return cache_root()


def config(name: str, preset: str = "quick", **settings: Any) -> Any:
    """The config of experiment ``name`` (``capture``, ``probe``, ``geometry``, ..., any stage of
    ``countlens reproduce``) at size ``preset``, with ``settings`` set by name."""
    experiments = by_name()
    if name not in experiments:
        raise ConfigError("name", f"no experiment {{name}} {name!r}; choose from {', '.join(experiments)}")
    return _settings(preset_config(name, check_preset(preset)), settings)


def run(name: str, preset: str = "quick", *, progress: bool = True, **settings: Any) -> Any:
    """Run experiment ``name`` at size ``preset`` with ``settings`` and return its result. An experiment that
    reads another's output takes it as a setting (``run("probe", acts=cap.folder)``); its default is where a
    report folder would hold it, so pass it. Work folders go to a temporary folder."""
    experiment = by_name()[name]
    cfg = config(name, preset, **settings)
    kwargs = {**experiment.run_options(cfg)}
    if "progress" in kwargs:
        kwargs["progress"] = progress
    with tempfile.TemporaryDirectory(prefix=f"countlens-{name}-") as work:
        kwargs.update({k: str(Path(work) / v) for k, v in experiment.places.items()})
        return experiment.run(cfg, **kwargs)


def capture(model: str = "default", *, preset: str = "quick", out: str | os.PathLike | None = None,
            progress: bool = True, **settings: Any):
    """Capture ``model`` (hub id, folder, ``.gguf`` file, or ``default``: the embedded SmolLM2-135M-Instruct)
    on the counting prompts of ``preset`` (``settings`` override any capture setting by name: ``counts``,
    ``L``, ``device``, ``locations``, ...). The activations go to ``out``, by default a folder of the countlens
    cache named by the config's digest, so the same call again reuses them (an interrupted one resumes).
    Returns the capture (its folder, metadata, rows and ``acts(location)``: ``(rows, d)``)."""
    from countlens.llm.capture.experiment import run_capture

    cfg = _settings(preset_config(SOURCE, check_preset(preset)), {"model": model, **settings})
    if out is None:
        out = _cache_root() / CAPTURES / config_digest(config_record(cfg), length=16)
    return run_capture(cfg, out, progress=progress)


def probe(capture: Any, *, preset: str = "quick", progress: bool = True, **settings: Any):
    """Validation-selected ridge probes of the count at every location of ``capture`` (a capture or its
    folder): a :class:`~countlens.probes.probe.ProbeResult` (``.plot()``: Figure 7)."""
    return run("probe", preset, progress=progress, acts=_folder(capture), **settings)


def sweep(capture: Any, *, preset: str = "quick", **settings: Any):
    """Figure 8's regularisation–norm sweep on ``capture``: a :class:`~countlens.probes.sweep.SweepResult`."""
    return run("probe-sweep", preset, acts=_folder(capture), **settings)


def geometry(capture: Any, *, preset: str = "quick", **settings: Any):
    """Figures 5 and 6 on ``capture`` (an LLM capture or :func:`toy_capture` representations): adjacent-centroid
    gaps, effective rank and PCA per location — a :class:`~countlens.analysis.experiments.GeometryResult`."""
    return run("geometry", preset, acts=_folder(capture), **settings)


def toy_capture(variant: str = "softmax", *, L: int = 100, d: int = 16, out: str | os.PathLike | None = None,
        progress: bool = False):
    """The toy's boundary representations (docs/definitions.md §1) of a checked construction of ``variant``
    counting to ``L`` at width ``d``, at every admissible ``(n, m)``, as a capture folder the same verbs read
    (``cl.geometry(cl.toy_capture(...))``; not ``cl.toy``, which is the subpackage). Returns the capture."""
    from countlens.core.capture import Capture
    from countlens.toy.experiments.construct import ConstructConfig, run_construct
    from countlens.toy.export import export_toy_activations
    from countlens.toy.model import read_params

    built = run_construct(ConstructConfig(variant=variant, d=d, L=L))
    file = read_params(built.params)
    if out is None:
        out = _cache_root() / TOYS / config_digest(built.params, length=16)
    folder = export_toy_activations(file.cfg, file.params, out, L=L, progress=progress)
    return Capture.from_folder(folder)


def compare(capture: Any, *, preset: str = "quick", progress: bool = False, **settings: Any):
    """The toy-vs-LLM comparison on ``capture``: the same geometry metrics and probe cost on the toy
    variants constructed at ``preset``'s size — a :class:`~countlens.analysis.experiments.CompareResult`."""
    from countlens.toy.experiments.construct import run_constructions

    with tempfile.TemporaryDirectory(prefix="countlens-compare-") as work:
        toy_folder = Path(work) / "toy-construct"
        run_constructions(preset_config("toy-construct", check_preset(preset)), progress=progress).save(toy_folder)
        cfg = config("compare", preset, toy=(str(toy_folder),), acts=_folder(capture), **settings)
        return by_name()["compare"].run(cfg, work_dir=work)


__all__ = ["config", "run", "capture", "probe", "sweep", "geometry", "toy_capture", "compare"]
