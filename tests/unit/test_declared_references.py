"""Every reference a declaration or a command line holds by name resolves: the experiments' ``figure``,
``plot``, ``view`` and ``cli`` (:func:`countlens.core.registry.check_references`), the dispatcher's
``_AREAS`` and the llm room's ``PROMPTS_MODULE``; and every declared ``plot`` draws its experiment's
test-preset result. A renamed function or module fails here, in seconds, not in a report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from countlens.core import registry
from countlens.core.registry import REFERENCE_KINDS, Experiment, check_references, resolve
from countlens.core.results import Result
from countlens.pipeline.experiments import experiments


def test_every_declared_reference_resolves_to_the_right_kind_of_thing():
    declared = experiments()
    references = [(e.name, kind, ref) for e in declared for kind, ref in e.references().items()]
    assert check_references(declared) == []
    # what was resolved is every reference there is: each kind is declared by some experiment, and every
    # experiment with a figure also has a view of it on the report page
    assert {kind for _, kind, _ in references} == set(REFERENCE_KINDS)
    assert len(references) >= 71, len(references)
    for e in declared:
        if e.figure is not None:
            assert e.view is not None, e.name
        if e.plot is not None:  # result.plot() finds the very function the declaration names
            assert registry.plot_of(e.result) is resolve(e.plot) or e.result in _SHARED_RESULTS, e.name


# Result types that two experiments return (capture and capture-items): plot_of finds the first declared plot.
_SHARED_RESULTS = {e.result for e in experiments() if sum(d.result is e.result for d in experiments()) > 1}


def test_the_command_lines_module_references_resolve():
    from countlens.llm.cli import PROMPTS_MODULE, command_modules
    from countlens.pipeline.cli import _AREAS

    for area, module in {**_AREAS, "llm prompts": PROMPTS_MODULE}.items():
        assert callable(resolve(module).register), (area, module)
    cli = {e.cli for e in experiments() if e.cli and e.run.__module__.startswith("countlens.llm.")}
    assert set(command_modules()) == cli | {PROMPTS_MODULE}


@dataclass
class _Result(Result):
    FILE: ClassVar[str] = "x.json"
    COMMAND: ClassVar[str] = "none"
    value: float = 0.0


def _run(config: Any) -> _Result:
    return _Result()


def _two(result, folder):
    return []


def _declared(**references) -> Experiment:
    return Experiment("x", "x", dict, _run, _Result, order=1, presets={p: {} for p in ("quick", "full", "test")},
                      **references)


@pytest.mark.parametrize("references", [{"figure": "countlens.core.registry.resolve"}, {"plot": "no colon"},
                                        {"cli": "countlens.llm.cli:register"}, {"view": ":_two"}])
def test_a_reference_of_the_wrong_form_is_refused_where_it_is_declared(references):
    with pytest.raises(ValueError, match=f"{next(iter(references))}="):
        _declared(**references)


def test_a_reference_that_names_nothing_or_the_wrong_thing_is_reported():
    here = __name__
    problems = check_references([
        _declared(figure=f"{here}:_two", plot=f"{here}:_run", view=f"{here}:no_such_view",
                  cli="countlens.core.registry"),
        _declared(figure=f"{here}:_run", cli="countlens.no_such_module")])
    assert len(problems) == 4, problems
    assert "view=" in problems[0] and "does not resolve" in problems[0]
    assert "cli=" in problems[1] and "register" in problems[1]
    assert "figure=" in problems[2] and "2 argument" in problems[2]
    assert "cli=" in problems[3] and "does not resolve" in problems[3]


@pytest.mark.slow
def test_every_declared_plot_draws_its_test_preset_result(test_preset_report):
    """Each declared ``plot`` on its experiment's result as the test-preset report saved it, read back:
    a matplotlib figure with something drawn on an axis."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    out, code = test_preset_report
    drawn, failed = [], []
    for e in experiments():
        if e.plot is None:
            continue
        try:
            fig = resolve(e.plot)(e.result.read(out / e.name / e.result.FILE))
        except Exception as exc:  # noqa: BLE001 - every experiment is tried, then all failures are reported
            failed.append(f"{e.name}: {exc.__class__.__name__}: {exc}")
            continue
        try:
            if not (isinstance(fig, Figure) and any(ax.has_data() or ax.texts for ax in fig.axes)):
                failed.append(f"{e.name}: nothing drawn")
        finally:
            plt.close(fig)
        drawn.append(e.name)
    assert not failed, failed
    assert code == 0
    assert len(drawn) == sum(e.plot is not None for e in experiments()) >= 19
