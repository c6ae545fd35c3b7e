"""The experiment registry: every experiment declares itself once, in its own module, and everything that
walks the experiments — the report's stages and their order, the three size presets, ``study``'s stage
groups, the ``--stages``/``--where`` help, the ``countlens llm`` subcommands and the tests that walk every
stage — is derived from the declarations.

A declaration (:class:`Experiment`) says what the experiment is (name, title, config type, ``run``, result
type, figure, report view), what it reads from other experiments (``reads``: a config field → the experiment
whose ``output`` it points at), what it writes for others (``output``), its sizes (``presets``: ``quick``,
``full``, ``test``: a config, or a function of the paths named in ``reads``), how the pipeline runs it (the run's model, progress bars, worker processes, a resume
cache, torch threads) and its command module. Adding an experiment adds its own files; it edits no list.

Discovery: :func:`discover` imports every module of the packages it is given (command modules and private
modules aside) once, so a module that calls :func:`declare` is found wherever it lies; the pipeline discovers
the four rooms (:func:`countlens.pipeline.experiments.experiments`), a room's command line its own package.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRESET_NAMES = ("quick", "full", "test")
# The declared references, resolved when used (:func:`resolve`), and the form each must have.
REFERENCE_KINDS = ("figure", "plot", "view", "cli")
_FUNCTION = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_REFERENCE_FORMS = {"figure": _FUNCTION, "plot": _FUNCTION, "view": _FUNCTION,
                    "cli": re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")}
# Which experiments a study runs for every model: ``model`` always, the others where asked (--patching, --where).
STUDY_GROUPS = ("model", "patching", "where")


@dataclass(frozen=True)
class Experiment:
    """One experiment, declared once (see the module docstring).

    ``run(config, **options, **places[, cache=][, loaded=])`` returns a ``result`` (the result contract of
    :mod:`countlens.core.results`); ``figure(result, folder)`` draws it; ``view(page, section)`` shows it on the
    report. ``reads`` maps a config field to the experiment whose ``output`` (a path inside that experiment's
    stage folder: ``"acts"``, ``"probes.json"``, ``""`` for the folder itself) the field is set to. ``presets``
    maps a size preset to the config at that size, or — for an experiment that ``reads`` — a function taking
    the read paths as keywords (``ProbeConfig`` itself, ``partial(SteeringConfig, max_prompts=4)``), or ``None``
    where the experiment is no stage of a report at that size (too slow for ``make demo``, say). ``inherits``
    names settings copied from the run's capture config (``model``, ``template``, ``device``, ...), so an
    experiment runs the capture's model and wording. ``uses_model`` (or a function of the config) says the
    stage is handed the run's loaded model. ``options`` (or a function of the config) are run keywords that
    say how it runs, never what it computes; ``places`` run keywords that get a folder inside the stage's own.
    ``order`` places it in the report; ``study`` is the study group it belongs to (``None``: not in a study).
    ``cli`` is the module whose ``register(subparsers)`` adds its command (``None``: its room's CLI has it).

    ``figure``, ``plot``, ``view`` and ``cli`` are references resolved when used (:func:`resolve`): figure
    modules import their result types and command modules their experiments, so the experiment cannot import
    them. Each is checked where it is declared (its form) and :func:`check_references` resolves every one (a
    unit test runs it over every declaration), so a renamed function or module fails the tests, not a report.
    """

    name: str
    title: str
    config: type
    run: Callable[..., Any]
    result: type
    order: int
    presets: Mapping[str, Any]
    figure: str | None = None  # "module:function", imported when drawn (figures import results, not the reverse)
    view: str | None = None
    plot: str | None = None  # "module:function": the main figure as a matplotlib figure (``result.plot()``)
    reads: Mapping[str, str] = field(default_factory=dict)
    output: str | None = None
    inherits: tuple[str, ...] = ()
    uses_model: bool | Callable[[Any], bool] = False
    options: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] = field(default_factory=dict)
    places: Mapping[str, str] = field(default_factory=dict)
    cache: bool = False
    threads: int | None = None
    study: str | None = None
    cli: str | None = None  # "module": the command module, imported by its room's command line

    def __post_init__(self) -> None:
        missing = [p for p in PRESET_NAMES if p not in self.presets]
        if missing:
            raise ValueError(f"experiment {self.name!r} declares no config for preset(s) {', '.join(missing)}")
        for kind, reference in self.references().items():
            if not _REFERENCE_FORMS[kind].fullmatch(reference):
                form = "package.module" if kind == "cli" else "package.module:function"
                raise ValueError(f"experiment {self.name!r}: {kind}={reference!r} is not of the form {form!r}")
        if self.study is not None and self.study not in STUDY_GROUPS:
            raise ValueError(f"experiment {self.name!r}: study group {self.study!r} is not one of {STUDY_GROUPS}")

    def preset(self, name: str, **paths: str) -> Any:
        """The config at size preset ``name``; ``paths`` (one per field of ``reads``: where the read
        experiments' outputs lie) go to a preset that is a function."""
        value = self.presets[name]  # None: not part of a report at this size (its own command still runs it)
        return value(**paths) if callable(value) else value

    def references(self) -> dict[str, str]:
        """The references this experiment declares, by kind (``figure``, ``plot``, ``view``, ``cli``)."""
        return {kind: getattr(self, kind) for kind in REFERENCE_KINDS if getattr(self, kind) is not None}

    def draw(self) -> Callable[[Any, Path], Any] | None:
        """The figure function (``figure(result, folder) -> paths``), imported now."""
        return resolve(self.figure)

    def show(self) -> Callable[..., None] | None:
        """The report view (``view(page, section)``), imported now."""
        return resolve(self.view)

    def run_options(self, config: Any) -> dict[str, Any]:
        """The run keywords for ``config`` (progress bars, worker processes)."""
        return dict(self.options(config) if callable(self.options) else self.options)

    def needs_model(self, config: Any) -> bool:
        """Whether the stage running ``config`` is handed the run's loaded model."""
        return bool(self.uses_model(config) if callable(self.uses_model) else self.uses_model)

    def output_path(self) -> str:
        """Where later experiments read this one's output, relative to a report folder."""
        if self.output is None:
            raise ValueError(f"experiment {self.name!r} declares no output for others to read")
        return str(Path(self.name) / self.output)


def resolve(reference: str | None) -> Any:
    """The object a ``"module:name"`` reference names, or the module a ``"module"`` one does (``None`` for
    ``None``)."""
    if reference is None:
        return None
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name) if name else importlib.import_module(module)


def check_references(experiments: list[Experiment]) -> list[str]:
    """Resolve every reference of ``experiments`` (their figure, plot and view modules and command modules
    imported); one line per reference that names nothing or the wrong kind of thing (a figure or view that
    takes other than two arguments, a plot that takes no result, a command module without ``register``)."""
    import inspect

    arity = {"figure": 2, "view": 2, "plot": 1}
    problems = []
    for e in experiments:
        for kind, reference in e.references().items():
            try:
                target = resolve(reference)
            except (ImportError, AttributeError) as exc:
                problems.append(f"{e.name}: {kind}={reference!r} does not resolve ({exc})")
                continue
            if kind == "cli":
                if not callable(getattr(target, "register", None)):
                    problems.append(f"{e.name}: cli={reference!r} has no register(subparsers)")
                continue
            try:
                inspect.signature(target).bind(*range(arity[kind]))
            except (TypeError, ValueError):
                problems.append(f"{e.name}: {kind}={reference!r} cannot be called with {arity[kind]} argument(s)")
    return problems


_DECLARED: dict[str, Experiment] = {}
_DISCOVERED: set[str] = set()


def declare(experiment: Experiment) -> Experiment:
    """Register ``experiment`` (called once, at the bottom of its module); returns it."""
    known = _DECLARED.get(experiment.name)
    if known is not None and known.run is not experiment.run:
        raise ValueError(f"two experiments are named {experiment.name!r}: {known.run.__module__} and "
                         f"{experiment.run.__module__}")
    _DECLARED[experiment.name] = experiment
    return experiment


def _import_all(package_name: str) -> None:
    """Import every module below ``package_name`` (not command modules, not private ones), once."""
    if package_name in _DISCOVERED:
        return
    package = importlib.import_module(package_name)
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
        last = info.name.rsplit(".", 1)[-1]
        if last != "cli" and not last.startswith("_"):
            importlib.import_module(info.name)
    _DISCOVERED.add(package_name)


def plot_of(result_type: type) -> Callable[[Any], Any]:
    """The plot function declared for results of ``result_type`` (``ValueError`` when it has none)."""
    for e in _DECLARED.values():
        if e.result is result_type and e.plot is not None:
            return resolve(e.plot)
    raise ValueError(f"no figure is declared for a {result_type.__name__}; its numbers are in .to_dict() and "
                     "the tables it saves")


def discover(*packages: str) -> list[Experiment]:
    """Every experiment declared in ``packages`` (dotted names; their modules imported once to find them), in
    report order."""
    for package in packages:
        _import_all(package)
    found = [e for e in _DECLARED.values() if any(e.run.__module__ == p or e.run.__module__.startswith(p + ".")
                                                  for p in packages)]
    return sorted(found, key=lambda e: (e.order, e.name))


__all__ = ["PRESET_NAMES", "STUDY_GROUPS", "REFERENCE_KINDS", "Experiment", "resolve", "check_references", "declare",
           "plot_of", "discover"]
