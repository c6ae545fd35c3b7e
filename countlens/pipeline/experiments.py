"""The rooms' experiments as the pipeline sees them: every declaration of the four rooms
(:mod:`countlens.core.registry`), in report order, each with its config at a size preset and its reads
resolved to paths inside a report folder.

``reproduce``'s stages, its presets, ``study``'s stage groups and the ``--stages``/``--where`` help are
derived from here, so a new experiment appears in all of them by declaring itself in its own module.
"""

from __future__ import annotations

from typing import Any

from countlens.core.errors import UsageError
from countlens.core.registry import PRESET_NAMES, Experiment, discover

ROOMS = ("countlens.toy", "countlens.llm", "countlens.probes", "countlens.analysis")
SOURCE = "capture"  # the experiment whose config carries the run's model and wording (--model, --template, ...)
PRESETS = PRESET_NAMES  # quick (make demo), full (the paper's sizes), test (the suite's)


def experiments() -> list[Experiment]:
    """Every experiment of the four rooms, in report order."""
    found = discover(*ROOMS)
    names = {e.name for e in found}
    unknown = sorted({f"{e.name}.{f} -> {n}" for e in found for f, n in e.reads.items() if n not in names})
    if unknown:
        raise RuntimeError(f"experiments read from undeclared experiments: {', '.join(unknown)}")
    return found


def by_name() -> dict[str, Experiment]:
    """Every experiment by name."""
    return {e.name: e for e in experiments()}


def check_preset(preset: str) -> str:
    """``preset`` if it is a size preset (:class:`UsageError` naming the choices otherwise)."""
    if preset not in PRESETS:
        raise UsageError(f"unknown size preset {preset!r}; choose {', '.join(PRESETS)}")
    return preset


def read_paths(experiment: Experiment) -> dict[str, str]:
    """``experiment``'s read fields → the outputs they read, relative to a report folder."""
    found = by_name()
    return {field: found[name].output_path() for field, name in experiment.reads.items()}


def preset_config(name: str, preset: str) -> Any:
    """The config of experiment ``name`` at size ``preset``, its reads pointing inside a report folder."""
    experiment = by_name()[name]
    return experiment.preset(check_preset(preset), **read_paths(experiment))


def study_stages(*groups: str) -> list[str]:
    """The names of the experiments of the study ``groups`` (``model``, ``patching``, ``where``), in order."""
    return [e.name for e in experiments() if e.study in groups]


def stage_titles() -> dict[str, str]:
    """Every experiment's name and title, in report order."""
    return {e.name: e.title for e in experiments()}


__all__ = ["ROOMS", "SOURCE", "PRESETS", "experiments", "by_name", "check_preset", "read_paths", "preset_config",
           "study_stages", "stage_titles"]
