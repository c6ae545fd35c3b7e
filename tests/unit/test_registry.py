"""The experiment registry: one declaration per experiment, and everything that walks the experiments derived
from it — adding an experiment edits no list (the report's stages, presets, study groups and help follow)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import pytest

from countlens.core import registry
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result
from countlens.pipeline.experiments import experiments, preset_config, stage_titles, study_stages
from countlens.pipeline.reproduce import build_stages


@dataclass(frozen=True)
class _Config:
    acts: str = ""
    k: int = 1


@dataclass
class _Result(Result):
    FILE: ClassVar[str] = "new.json"
    COMMAND: ClassVar[str] = "countlens llm new"
    value: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)


def _run(config: _Config, progress: bool = False) -> _Result:
    return _Result(float(config.k))


_run.__module__ = "countlens.llm.new_experiment"  # as if it lived in a new module of the llm room


def _plot(result: _Result):
    return ("plotted", result.value)


@pytest.fixture
def new_experiment():
    """A new experiment declared the way a module declares one, removed afterwards."""
    e = declare(Experiment("new-thing", "Figure 99: a new thing", _Config, _run, _Result, order=205,
                           presets={"quick": _Config, "full": _Config, "test": partial(_Config, k=3)},
                           reads={"acts": "capture"}, inherits=(), uses_model=False, study="where",
                           plot=f"{__name__}:_plot"))
    yield e
    registry._DECLARED.pop("new-thing")


def test_every_stage_is_declared_once_in_report_order():
    names = [e.name for e in experiments()]
    assert len(names) == len(set(names))
    assert names.index("capture") < names.index("probe") < names.index("steering") < names.index("lens")
    assert [s.name for s in build_stages("test")] == names
    for e in experiments():  # every preset builds, and every read points at a declared output
        for preset in ("quick", "full", "test"):
            config = preset_config(e.name, preset)
            # None: no stage at that size (only organism-scaling's quick, whose training takes 18 minutes)
            assert isinstance(config, e.config) or (config is None and (e.name, preset) == ("organism-scaling", "quick"))


def test_a_new_experiment_appears_everywhere_without_a_list_edit(new_experiment):
    names = [s.name for s in build_stages("test")]
    assert names.index("heads") < names.index("new-thing") < names.index("lens")  # by its order
    stage = {s.name: s for s in build_stages("test")}["new-thing"]
    assert stage.needs == ("capture",) and stage.links == ("acts",)
    assert stage.config == _Config(acts="capture/acts", k=3)  # the read resolved, the test size applied
    assert stage_titles()["new-thing"] == "Figure 99: a new thing"
    assert "new-thing" in study_stages("where") and "new-thing" not in study_stages("model")
    assert _Result(2.0).plot() == ("plotted", 2.0)  # result.plot() finds its declared figure


def test_the_reproduce_help_lists_a_new_stage(new_experiment, capsys):
    from countlens.pipeline.cli import main

    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    assert "new-thing" in capsys.readouterr().out


def test_a_declaration_missing_a_preset_or_reading_nothing_declared_is_refused():
    with pytest.raises(ValueError, match="preset"):
        Experiment("x", "x", _Config, _run, _Result, order=1, presets={"quick": _Config()})
    e = declare(Experiment("reads-nothing", "x", _Config, _run, _Result, order=1,
                           presets={p: _Config for p in ("quick", "full", "test")}, reads={"acts": "no-such"}))
    try:
        with pytest.raises(RuntimeError, match="no-such"):
            experiments()
    finally:
        registry._DECLARED.pop(e.name)


def test_a_result_without_a_declared_figure_says_so():
    @dataclass
    class Plain(Result):
        FILE: ClassVar[str] = "plain.json"
        COMMAND: ClassVar[str] = "none"

    with pytest.raises(ValueError, match="no figure is declared"):
        Plain().plot()


def _readme_table() -> list[list[str]]:
    """The rows of the figure table of the code's layout (docs/architecture.md, once the README's Layout
    section): cells without their backticks."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("| Table / figure |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_readme_table_names_every_experiment_where_it_is_declared():
    rows = {row[-1].strip("`"): row for row in _readme_table() if row[-1] != "—"}
    declared = {e.name: e for e in experiments()}
    assert set(rows) == set(declared)
    for name, e in declared.items():
        room, computes = rows[name][1].strip("`"), rows[name][2]
        path = room + computes.split(":")[0].strip("`")  # llm/ + capture/experiment.py
        module = e.run.__module__.removeprefix("countlens.").replace(".", "/") + ".py"
        assert path == module and f"{e.run.__name__}(" in computes, (name, path, module)


def test_experiments_that_inherit_the_model_run_the_captures_model_whole():
    # the revision, dtype and device travel with the name: a stage's own plan reads the model it is handed
    stages = build_stages("test", {"model": "/tmp/m", "revision": "b" * 40, "dtype": "bfloat16"})
    inheriting = [s for s in stages if "model" in getattr(registry._DECLARED.get(s.name), "inherits", ())]
    assert {s.name for s in inheriting} >= {"patching", "heads"}
    for s in inheriting:
        assert s.config.model == s.model == stages[[t.name for t in stages].index("capture")].config.model, s.name
