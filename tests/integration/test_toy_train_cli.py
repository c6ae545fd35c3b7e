"""`countlens toy train | table2 | figure2 | figure3 | figure4` and `table3 --attained`, on real files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from countlens.pipeline.cli import main
from countlens.toy.attained import attained_column
from countlens.toy.check import full_domain_check
from countlens.toy.experiments import Table3Config
from countlens.toy.figures import plot_figure2, plot_figure3, plot_figure4
from countlens.toy.model import read_params


def toy(*argv: str) -> int:
    return main(["toy", *argv])


def test_train_writes_the_issue_keys_and_checkable_params(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert toy("train", "--variant", "softmax", "--L", "12", "--d", "8", "--steps", "60", "--seed", "1",
               "--json", str(out)) == 0
    data = json.loads(out.read_text())
    for key in ("test_exact_accuracy", "full_domain_worst_error", "passed", "max_norm", "log", "provenance",
                "x_b", "x_s", "x_l", "w", "b0", "check"):
        assert key in data
    assert data["provenance"]["config"]["model"]["L"] == 12 and data["provenance"]["config"]["train"]["steps"] == 60
    file = read_params(data)  # a parameter file: the vectors at the top level, and the check that certified them
    assert file.cfg.L == 12 and file.passed == data["passed"] and file.check["worst_error"] == data["full_domain_worst_error"]
    check = full_domain_check(file.cfg, file.params)
    assert check.passed == data["passed"]
    assert check.worst_error == pytest.approx(data["full_domain_worst_error"], rel=1e-12)
    assert check.max_norm == pytest.approx(data["max_norm"], rel=1e-12)
    assert not list(tmp_path.glob(".*ckpt"))  # the default checkpoint is removed after success
    # `countlens toy check --params` reads the same file
    chk = tmp_path / "check.json"
    assert toy("check", "--params", str(out), "--L", "12", "--json", str(chk)) == 0
    assert json.loads(chk.read_text())["worst_error"] == pytest.approx(data["full_domain_worst_error"])


def test_train_classification_params_carry_U_and_c(tmp_path):
    out = tmp_path / "cls.json"
    assert toy("train", "--variant", "softmax-postln-bare", "--readout", "classification", "--L", "6", "--d", "4",
               "--steps", "10", "--json", str(out)) == 0
    params = json.loads(out.read_text())
    assert np.asarray(params["U"]).shape == (7, 4) and np.asarray(params["c"]).shape == (7,)
    assert read_params(params).cfg.readout == "classification"


@pytest.mark.parametrize("flags, needle", [
    (["--optimizer", "sgd"], "--optimizer must be one of"),
    (["--steps", "0"], "--steps must be"),
    (["--cap", "0"], "--cap must be"),
    (["--cap", "-3"], "--cap must be"),
])
def test_train_bad_input_is_one_line_exit_2(tmp_path, capsys, flags, needle):
    out = tmp_path / "bad.json"
    assert toy("train", "--variant", "softmax", "--L", "5", "--json", str(out), *flags) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and not out.exists()


def test_train_refuses_a_checkpoint_from_another_config(tmp_path, capsys):
    ck = tmp_path / "run.ckpt"
    base = ["train", "--variant", "softmax", "--d", "4", "--steps", "4", "--checkpoint", str(ck)]
    assert toy(*base, "--L", "6", "--json", str(tmp_path / "a.json")) == 0 and ck.exists()
    capsys.readouterr()
    assert toy(*base, "--L", "7", "--json", str(tmp_path / "b.json")) == 2
    err = capsys.readouterr().err
    assert "different run" in err and not (tmp_path / "b.json").exists()


def test_train_divergence_is_reported_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "div.json"
    rc = toy("train", "--variant", "softmax", "--L", "6", "--d", "4", "--optimizer", "adam", "--lr", "1e200",
             "--steps", "20", "--json", str(out))
    assert rc == 1 and not out.exists()
    assert "diverged at step" in capsys.readouterr().err


def test_table2_summaries_are_over_the_runs(tmp_path, capsys):
    out = tmp_path / "t2.json"
    assert toy("table2", "--d", "4", "--L", "6,8", "--seeds", "0,1", "--steps", "15", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert [(r["d"], r["L"]) for r in data["rows"]] == [(4, 6), (4, 8)]
    for row in data["rows"]:
        acc = [r["test_exact_accuracy"] for r in row["runs"]]
        err = [r["full_domain_worst_error"] for r in row["runs"]]
        assert len(acc) + len(row["diverged"]) == 2
        assert row["test_exact_accuracy"]["mean"] == pytest.approx(np.mean(acc))
        assert row["full_domain_worst_error"]["min"] == pytest.approx(min(err))
        assert row["full_domain_worst_error"]["max"] == pytest.approx(max(err))
    assert "test exact accuracy" in capsys.readouterr().out
    assert not (tmp_path / ".t2.json.runs").exists()


def test_table3_attained_column_is_a_rechecked_lower_bound():
    config = Table3Config(d=8, B=(1.0, 40.0), attained=True, attained_grid=(3, 6, 12), attained_steps=60)
    row = {"B": list(config.B), **attained_column("softmax", config)}
    assert len(row["attained"]) == len(row["B"]) == len(row["attained_next_failing"])
    for B, att, nxt, runs in zip(row["B"], row["attained"], row["attained_next_failing"], row["attained_runs"],
                                 strict=True):
        passing = [r for r in runs if r.get("passed") and r["L"] == att]
        if att:
            assert passing and passing[0]["recheck_passed"] and passing[0]["max_norm"] <= B + 1e-9
        if nxt is not None:
            assert nxt > att and all(not r.get("passed") for r in runs if r["L"] == nxt)
    assert row["attained"][1] >= row["attained"][0]


def _table3_file(tmp_path):
    path = tmp_path / "t3.json"
    path.write_text(json.dumps({"d": 4, "tau": 0.5, "variants": {
        "softmax": {"B": [10, 30], "l_max": [19, 58], "attained": [10, 20], "attained_next_failing": [20, 50]}}}))
    return path


def test_figures_write_json_png_pdf_and_redraw_from_json(tmp_path):
    out = tmp_path / "figs"
    assert toy("figure2", "--out", str(out), "--L", "4,6", "--steps", "30", "--d", "4",
               "--table3", str(_table3_file(tmp_path))) == 0
    assert toy("figure3", "--out", str(out), "--L", "8", "--seeds", "0,1", "--steps", "10", "--d", "4") == 0
    assert toy("figure4", "--out", str(out), "--L", "8", "--steps", "10", "--minibatch-steps", "20", "--d", "4",
               "--batch-size", "16") == 0
    for name, plot in (("figure2", plot_figure2), ("figure3", plot_figure3), ("figure4", plot_figure4)):
        for ext in ("json", "png", "pdf"):
            assert (out / f"{name}.{ext}").stat().st_size > 0
        plot(json.loads((out / f"{name}.json").read_text()))  # redraw without recomputing
    f2 = json.loads((out / "figure2.json").read_text())
    assert f2["construction"]["passed"] == [True, True]
    assert f2["storage"][0]["classification_readout"] == 5 * 5
    f4 = json.loads((out / "figure4.json").read_text())
    assert [r["optimizer"] for r in f4["runs"]] == ["adam", "adam-minibatch"]
    assert not list(out.glob(".*runs"))


def test_figure_bad_input_exit_2(tmp_path, capsys):
    assert toy("figure3", "--out", str(tmp_path), "--steps", "0") == 2
    assert "--steps must be >= 1" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert toy("figure2", "--out", str(tmp_path), "--table3", str(bad)) == 2
    assert "--table3 " in capsys.readouterr().err
