"""Every toy result follows the one result contract: it saves into a folder, reads back typed, field for
field, and records the config that made it; the report views read the typed result."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from countlens.core.io import write_json_atomic
from countlens.core.report import REPORT_FILE, Page, Section
from countlens.core.results import Result
from countlens.core.threads import torch_threads
from countlens.toy import experiments as ex
from countlens.toy.model import ToyConfig, read_params
from countlens.toy.train import TrainConfig, TrainResult, train
from tests.helpers.report_checks import check_report

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def same(a, b) -> bool:
    """Equal field for field (NaN equal to NaN: a NaN worst error reads back as NaN)."""
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One small result of every toy experiment (and a training run), by name."""
    folder = tmp_path_factory.mktemp("toy-results")
    with torch_threads(1):
        out = {"construct": ex.run_construct(ex.ConstructConfig("softmax-postln-learned", 4, 12))}
        params = out["construct"].write(folder / "p.json")
        out["check"] = ex.run_check(ex.CheckConfig(str(params), 20))  # a longer domain: fails, and says where
        out["constructions"] = ex.run_constructions(ex.ConstructionsConfig(("linear", "softmax"), 4, 12))
        # bare pre-LN past its L_cap: an infinite B_min and a NaN worst error
        out["rates"] = ex.run_rates(ex.RatesConfig(d=4, L=(5, 20), variants=("softmax", "softmax-preln-bare")))
        out["lcap"] = ex.run_lcap(ex.LcapConfig(d=(3,)))
        out["table2"] = ex.run_table2(ex.Table2Config(d=(3,), L=(6,), seeds=(0,), steps=3))
        out["table3"] = ex.run_table3(ex.Table3Config(d=4, B=(10.0,), attained=True, attained_grid=(3, 6),
                                                      attained_steps=20, attained_working_set=16,
                                                      attained_check_every=10))
        table3 = out["table3"].save(folder)[0]
        out["figure1"] = ex.run_figure1(ex.Figure1Config(d=4, L=5))
        out["figure2"] = ex.run_figure2(ex.Figure2Config(d=4, L=(4,), steps=3, table3=str(table3)))
        out["figure3"] = ex.run_figure3(ex.Figure3Config(d=4, L=6, seeds=(0,), steps=4))
        out["figure4"] = ex.run_figure4(ex.Figure4Config(d=4, L=6, steps=3, minibatch_steps=3, batch_size=8))
        out["train"] = train(ToyConfig("softmax", 4, 6), TrainConfig(steps=5, seed=1, log_every=2))
    return out


NAMES = ["construct", "check", "constructions", "rates", "lcap", "table2", "table3", "figure1", "figure2", "figure3",
         "figure4", "train"]


@pytest.mark.parametrize("name", NAMES)
def test_every_result_reads_back_field_for_field(results, name, tmp_path):
    r = results[name]
    assert isinstance(r, Result) and r.provenance["config"] and "versions" in r.provenance
    back = type(r).from_dict(json.loads(json.dumps(r.to_dict(), default=str)))
    assert same(r, back), name
    paths = r.save(tmp_path)
    assert paths[0] == tmp_path / type(r).FILE
    assert same(type(r).read(tmp_path), r) and same(type(r).read(paths[0]), r)  # non-finite values included
    assert json.loads(paths[0].read_text()) == json.loads(r.write(tmp_path / "again.json").read_text())


def test_provenance_is_the_config_itself(results):
    t3 = results["table3"].provenance["config"]
    assert t3["attained_grid"] == [3, 6] and t3["attained_working_set"] == 16 and t3["tau"] is None
    assert results["rates"].provenance["config"]["variants"] == ["softmax", "softmax-preln-bare"]
    assert results["train"].provenance["config"]["model"]["L"] == 6
    assert results["train"].provenance["config"]["train"]["steps"] == 5
    assert results["figure2"].provenance["config"]["attained"]["d"] == 4  # the nested Table 3 config too


def test_results_that_are_parameter_files_read_as_one(results, tmp_path):
    construct, trained = results["construct"], results["train"]
    for r, L in ((construct, 12), (trained, 6)):
        file = read_params(json.loads(r.write(tmp_path / "p.json").read_text()))
        assert file.cfg.L == L and file.check["L"] == L and file.passed == file.check["passed"]
    assert trained.toy()[0] == ToyConfig("softmax", 4, 6)
    assert type(TrainResult.read(trained.write(tmp_path / "t.json"))) is TrainResult
    attained = [p for row in results["table3"].variants.values() for p in row["attained_params"] if p is not None]
    assert attained
    for params in attained:  # the passing parameters, with the re-check that certified them
        file = read_params(params)
        assert file.cfg.L == params["L"] == file.check["L"] and file.passed is True


def test_constructions_save_each_construction_as_construct_writes_it(results, tmp_path):
    written = results["constructions"].save(tmp_path)
    assert [p.name for p in written] == ["constructions.json", "linear.json", "softmax.json"]
    for c in results["constructions"].constructions:
        alone = ex.run_construct(ex.ConstructConfig(c.params["variant"], 4, 12)).to_dict()
        saved = json.loads((tmp_path / f"{c.params['variant']}.json").read_text())
        assert {k: v for k, v in saved.items() if k != "provenance"} == \
            json.loads(json.dumps({k: v for k, v in alone.items() if k != "provenance"}))


def test_a_figure_result_of_the_other_figure_is_refused(results, tmp_path):
    from countlens.core.errors import UsageError

    results["figure3"].save(tmp_path)
    with pytest.raises(UsageError, match="figure4.json"):
        ex.Figure4Result.read(tmp_path)


VIEWS = {"rates": "rates_view", "lcap": "lcap_view", "table2": "table2_view", "table3": "table3_view",
         "figure1": "figure1_view", "figure2": "figure2_view", "figure3": "figure3_view", "figure4": "figure4_view"}


@pytest.mark.parametrize("name", list(VIEWS))
def test_report_views_take_the_typed_result(results, name, tmp_path):
    from countlens.toy import figures

    r = results[name]
    rel = f"toy-{name}/{type(r).FILE}"
    r.save(tmp_path / f"toy-{name}")
    write_json_atomic(tmp_path / REPORT_FILE, {"preset": "test"})
    page = Page(tmp_path)
    back = type(r).read(tmp_path / rel)
    # the view reads the typed result: the raw JSON handed beside it is not consulted
    getattr(figures, VIEWS[name])(page, Section(stage=None, rel=rel, result=back))
    html = "".join(page.parts)
    assert html
    parser = check_report(tmp_path, html)
    assert parser.values  # every number a span of the result's file
