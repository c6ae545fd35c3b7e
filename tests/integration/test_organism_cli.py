"""`countlens organism train | check` on real files: bad input refused in one line before any training, a tiny
organism trained, reused, checked against its planted circuit, and run by another countlens command."""

from __future__ import annotations

import json

import pytest

from countlens.pipeline.cli import main

TINY = ["--L", "3", "--layers", "1", "--heads", "2", "--width", "16", "--live-heads", "0.1", "--pairs", "a/b",
        "--lr", "0.01", "--batch-size", "16", "--max-steps", "400", "--eval-every", "20", "--softmax", "full", "--quiet",
        "--threads", "1"]


def organism(*argv: str) -> int:
    return main(["organism", *argv])


@pytest.mark.parametrize("flags, needle", [
    (["--width", "30", "--heads", "4"], "--width must be divisible by --heads"),
    (["--layers", "2", "--heads", "4", "--live-heads", "2.0"], "--live-heads names head 2.0"),
    (["--heads", "4", "--live-heads", "0.4"], "--live-heads names head 0.4"),
    (["--live-heads", "0-1"], "--live-heads takes block.head pairs"),
    (["--L", "0"], "--L must be >= 1"),
    (["--pairs", "a/a"], "--pairs"),
    (["--tokenizer", "/nonexistent/model"], "--tokenizer"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, flags, needle):
    out = tmp_path / "org"
    assert organism("train", "--out", str(out), "--quiet", *flags) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_a_folder_holding_something_else_is_refused(tmp_path, capsys):
    (tmp_path / "data.csv").write_text("1,2\n")
    assert organism("train", "--out", str(tmp_path), *TINY) == 2
    err = capsys.readouterr().err.strip()
    assert "something other than an organism" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


@pytest.mark.slow
def test_train_check_reuse_and_capture_on_the_organism(tmp_path, capsys):
    out = tmp_path / "org"
    assert organism("train", "--out", str(out), *TINY) == 0
    said = capsys.readouterr().out
    data = json.loads((out / "organism.json").read_text())
    assert data["converged"] and data["held_out_accuracy"] >= 0.99 and data["dead_heads"] == [[0, 0]]
    assert f"held-out greedy accuracy {data['held_out_accuracy']:.4f}" in said
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert organism("train", "--out", str(out), *TINY) == 0  # reused, not retrained
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    capsys.readouterr()
    assert organism("train", "--out", str(out), *TINY[:-3], "--seed", "3", "--quiet") == 2  # other settings
    assert "other settings" in capsys.readouterr().err
    assert organism("check", "--model", str(out), "--out", str(tmp_path / "checks"), "--quiet", "--threads", "1") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 19 and all(line.startswith("organism check: PASS") for line in lines[:-1])  # one per check
    assert lines[-1].startswith("organism check: INFO steering slope")  # reported with no bound
    checks = json.loads((tmp_path / "checks" / "checks.json").read_text())["checks"]
    assert all(c["passed"] for c in checks if c["holds"] != "info")
    # Any countlens command runs on the folder like on any chat model.
    acts = tmp_path / "acts"
    assert main(["llm", "capture", "--model", str(out), "--L", "3", "--counts", "0:3", "--pairs", "a/b",
                 "--configs", "count", "--seeds", "1000000", "--out", str(acts), "--quiet"]) == 0
    meta = json.loads((acts / "meta.json").read_text())
    assert meta["n_prompts"] == 4


@pytest.mark.parametrize("flags, needle", [
    (["--Ls", "10"], "--Ls needs at least two lengths"),
    (["--Ls", "2,10"], "--Ls must be >= 3"),
    (["--seeds", "-1"], "--seeds"),
    (["--width", "15"], "--width"),
    (["--llm-acts", "/nonexistent/acts"], "--llm-acts must name a capture folder"),
    (["--llm-location", "-1"], "--llm-location names a location of --llm-acts"),
])
def test_scaling_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, flags, needle):
    out = tmp_path / "scaling"
    assert organism("scaling", "--out", str(out), "--preset", "test", "--quiet", *flags) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.slow
def test_scaling_trains_measures_and_reuses_beside_an_llm_capture(tmp_path, capsys, tiny_chat_model):
    acts = tmp_path / "acts"
    assert main(["llm", "capture", "--model", str(tiny_chat_model), "--L", "8", "--counts", "0:8", "--pairs", "a/b",
                 "--configs", "count", "--seeds", "0,1", "--per-count", "2", "--out", str(acts), "--quiet"]) == 0
    out = tmp_path / "scaling"
    argv = ["scaling", "--out", str(out), "--preset", "test", "--llm-acts", str(acts), "--quiet", "--threads", "1"]
    assert organism(*argv) == 0
    said = capsys.readouterr().out
    data = json.loads((out / "organism_scaling.json").read_text())
    assert [r["kind"] for r in data["rows"]] == ["organism", "organism", "toy", "toy", "toy-classification",
                                                 "toy-classification", "llm"]
    assert data["toy_variant"] == "softmax-preln-learned" and "RMSNorm" in data["norm_placement"]
    assert all(r["converged"] for r in data["rows"] if r["kind"] == "organism")
    assert data["rows"][-1]["L"] == 8 and data["rows"][-1]["location"] == "blocks.1.hook_resid_post"
    assert f"toy softmax-preln-learned {data['rates']['toy']:.3f}" in said
    assert {p.name for p in out.iterdir()} >= {"L3-seed0", "L4-seed0", "organism_scaling.csv", "organism_scaling.png"}
    stamp = (out / "L3-seed0" / "model.safetensors").stat().st_mtime_ns
    assert organism(*argv) == 0  # the organisms are reused, not retrained
    assert (out / "L3-seed0" / "model.safetensors").stat().st_mtime_ns == stamp
