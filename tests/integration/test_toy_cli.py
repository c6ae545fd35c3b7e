"""`countlens toy ...` end to end: real files, the JSON keys other tools read, one-line errors."""

import json
import subprocess
import sys

import pytest

from countlens.core import args
from countlens.core.cache import ResultCache
from countlens.pipeline.cli import main
from countlens.toy.experiments import l_max_cache_key


def run(argv):
    return main(["toy", *argv])


def test_construct_then_check_roundtrip(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert run(["construct", "--variant", "softmax-postln-learned", "--d", "16", "--L", "60", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for key in ("variant", "d", "tau", "x_b", "x_s", "x_l", "w", "b0", "gamma", "beta", "check", "provenance"):
        assert key in data
    assert set(data["check"]) >= {"passed", "worst_error", "worst_pair", "max_norm"}
    assert data["check"]["passed"] and len(data["x_b"]) == 16
    chk = tmp_path / "c.json"
    assert run(["check", "--params", str(out), "--L", "60", "--json", str(chk)]) == 0
    res = json.loads(chk.read_text())
    assert res["passed"] and res["worst_error"] == pytest.approx(data["check"]["worst_error"], rel=1e-12)
    assert res["pairs"] == 61 * 62 // 2
    # a longer domain than the construction was built for fails, and says where
    assert run(["check", "--params", str(out), "--L", "200"]) == 0
    assert "passed=False" in capsys.readouterr().out


def test_construct_without_learned_ln_has_no_gamma(tmp_path):
    out = tmp_path / "p.json"
    assert run(["construct", "--variant", "softmax", "--d", "8", "--L", "30", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert "gamma" not in data and data["check"]["passed"]


def test_rates_json(tmp_path):
    out = tmp_path / "r.json"
    assert run(["rates", "--d", "16", "--L", "30,100,300", "--variants", "softmax,linear", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    sm = data["variants"]["softmax"]
    assert sm["L"] == [30, 100, 300] and len(sm["b_min"]) == 3 and sm["claimed"] == "1"
    assert 0.85 < sm["slope"] < 1.15
    assert abs(data["variants"]["linear"]["slope"]) < 1e-6


def test_lcap_json_and_reason(tmp_path, capsys):
    out = tmp_path / "l.json"
    assert run(["lcap", "--d", "3,4", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["d"] == [3, 4] and len(data["l_cap"]) == 2
    assert all(c < b for c, b in zip(data["l_cap"], data["l_infeasible"], strict=True))
    assert "sphere" in capsys.readouterr().out


def test_table3_prints_writes_and_resumes(tmp_path, capsys):
    out = tmp_path / "t.json"
    # an interrupted earlier run left the softmax row: it is reused, not recomputed
    ResultCache(tmp_path / ".t.json.runs").put(l_max_cache_key("softmax", 10.0, 16, 0.25), {
        "variant": "softmax", "B": 10.0, "d": 16, "L": 999, "max_norm": 9.0, "worst_error": 0.4})
    assert run(["table3", "--d", "16", "--B", "10", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["variants"]) == {"softmax", "softmax-postln-bare", "softmax-postln-learned"}
    assert data["variants"]["softmax"]["l_max"] == [999]
    assert not (tmp_path / "t.json.partial").exists()
    for v, paper in (("softmax-postln-bare", 11), ("softmax-postln-learned", 43)):
        row = data["variants"][v]
        assert row["l_max"][0] >= paper and row["max_norm"][0] <= 10  # at least the paper's construction
    assert "[11]" in capsys.readouterr().out  # the paper's value printed alongside


def test_figure1_writes_png_pdf_and_json(tmp_path):
    assert run(["figure1", "--out", str(tmp_path), "--L", "12"]) == 0
    for name in ("figure1.png", "figure1.pdf", "figure1.json"):
        assert (tmp_path / name).stat().st_size > 1000
    data = json.loads((tmp_path / "figure1.json").read_text())
    assert [p["variant"] for p in data["panels"]] == ["linear", "softmax", "softmax-postln-bare", "softmax-preln-bare"]


CONSTRUCT = ["construct", "--variant", "softmax", "--d", "16", "--L", "10"]
TRAIN = ["train", "--variant", "softmax", "--L", "6", "--d", "4", "--steps", "3"]
# Every toy command and every option its config validates: a bad value, and the flag the message must name
# (the command's own, worded by the dispatcher from the config field the error is about).
BAD_VALUES = [
    (["construct", "--variant", "nope", "--d", "16", "--L", "10"], "--variant must be one of"),
    (["construct", "--variant", "softmax", "--d", "16", "--L", "0"], "--L must be >= 1"),
    (["construct", "--variant", "softmax-postln-bare", "--d", "2", "--L", "10"], "--d must be >= 3"),
    ([*CONSTRUCT, "--tau", "-1"], "--tau must be a positive finite number"),
    (["construct", "--variant", "softmax-preln-bare", "--d", "4", "--L", "40"], "--L 40 is infeasible for "
                                                                                "softmax-preln-bare at --d 4"),
    (["check", "--params", "PARAMS", "--L", "0"], "--L must be >= 1"),
    (["rates", "--L", "0,10"], "--L values must be >= 1"),
    (["rates", "--variants", "softmax,nope"], "--variants must be one of"),
    (["rates", "--d", "2"], "--d must be >= 3"),
    (["rates", "--tau", "0"], "--tau must be"),
    (["lcap", "--d", "2"], "--d must be >= 3"),
    (["lcap", "--d", "0,3"], "--d values must be >= 1"),
    (["lcap", "--tau", "-1"], "--tau must be"),
    (["table3", "--B", "0"], "--B must be finite and > 0"),
    (["table3", "--d", "2"], "--d must be >= 3"),
    (["table3", "--tau", "0"], "--tau must be"),
    (["table3", "--attained", "--attained-grid", "0,5"], "--attained-grid values must be >= 1"),
    (["table3", "--attained", "--attained-seeds", "-1"], "--attained-seeds values must be >= 0"),
    (["table3", "--attained", "--attained-steps", "0"], "--attained-steps must be >= 1"),
    (["table3", "--attained", "--attained-loss", "l1"], "--attained-loss must be one of"),
    (["table3", "--attained", "--attained-parametrization", "spherical"], "--attained-parametrization must be one of"),
    (["table3", "--attained", "--attained-working-set", "-1"], "--attained-working-set must be >= 0"),
    (["table3", "--attained", "--attained-check-every", "0"], "--attained-check-every must be >= 1"),
    (["table3", "--attained", "--attained-patience", "-1"], "--attained-patience must be >= 0"),
    (["table3", "--attained", "--workers", "0"], "--workers"),
    (["figure1", "--out", "OUT", "--L", "1"], "--L must be >= 2"),
    (["figure1", "--out", "OUT", "--d", "2"], "--d must be >= 3"),
    ([*TRAIN, "--optimizer", "sgd"], "--optimizer must be one of"),
    ([*TRAIN, "--L", "0"], "--L must be >= 1"),
    ([*TRAIN, "--tau", "-1"], "--tau must be"),
    ([*TRAIN, "--steps", "0"], "--steps must be"),
    ([*TRAIN, "--cap", "0"], "--cap must be"),
    ([*TRAIN, "--lr", "-1"], "--lr must be"),
    ([*TRAIN, "--batch-size", "0"], "--batch-size must be"),
    ([*TRAIN, "--test-fraction", "1"], "--test-fraction must lie"),
    ([*TRAIN, "--log-every", "0"], "--log-every must be"),
    ([*TRAIN, "--init-scale", "0"], "--init-scale must be"),
    ([*TRAIN, "--ce-scale", "0"], "--ce-scale must be"),
    ([*TRAIN, "--beta", "0"], "--beta must be"),
    ([*TRAIN, "--working-set", "-1"], "--working-set must be"),
    ([*TRAIN, "--grow", "0"], "--grow must be"),
    ([*TRAIN, "--patience", "-1"], "--patience must be"),
    ([*TRAIN, "--working-set", "8", "--optimizer", "adam-minibatch"], "(--working-set) takes a full-batch --optimizer"),
    ([*TRAIN, "--readout", "classification", "--loss", "max"], "--loss and working-set training (--working-set) "
                                                               "are for the regression --readout"),
    ([*TRAIN, "--L", "1", "--test-fraction", "0.9"], "use a larger --L"),
    (["table2", "--d", "0"], "--d values must be >= 1"),
    (["table2", "--L", "0"], "--L values must be >= 1"),
    (["table2", "--seeds", "-1"], "--seeds values must be >= 0"),
    (["table2", "--steps", "0"], "--steps must be"),
    (["table2", "--optimizer", "sgd"], "--optimizer must be one of"),
    (["table2", "--lr", "-1"], "--lr must be"),
    (["table2", "--workers", "0"], "--workers"),
    (["figure2", "--out", "OUT", "--L", "0"], "--L values must be >= 1"),
    (["figure2", "--out", "OUT", "--seeds", "-1"], "--seeds values must be >= 0"),
    (["figure2", "--out", "OUT", "--steps", "0"], "--steps must be"),
    (["figure2", "--out", "OUT", "--lr", "-1"], "--lr must be"),
    (["figure2", "--out", "OUT", "--ce-scale", "0"], "--ce-scale must be"),
    (["figure2", "--out", "OUT", "--B", "0"], "--B must be finite and > 0"),
    (["figure2", "--out", "OUT", "--d", "2"], "--d must be >= 3"),
    (["figure2", "--out", "OUT", "--table3", "PARAMS"], "--table3 "),
    (["figure3", "--out", "OUT", "--L", "0"], "--L must be >= 1"),
    (["figure3", "--out", "OUT", "--seeds", "-1"], "--seeds values must be >= 0"),
    (["figure3", "--out", "OUT", "--steps", "0"], "--steps must be"),
    (["figure3", "--out", "OUT", "--lr", "-1"], "--lr must be"),
    (["figure4", "--out", "OUT", "--L", "0"], "--L must be >= 1"),
    (["figure4", "--out", "OUT", "--steps", "0"], "--steps must be"),
    (["figure4", "--out", "OUT", "--minibatch-steps", "0"], "--minibatch-steps must be"),
    (["figure4", "--out", "OUT", "--batch-size", "0"], "--batch-size must be"),
    (["figure4", "--out", "OUT", "--lr", "0"], "--lr must be"),
]


@pytest.mark.parametrize("argv, fragment", BAD_VALUES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD_VALUES])
def test_a_bad_value_is_one_line_naming_the_commands_own_flag(tmp_path, argv, fragment, capsys, monkeypatch):
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"variant": "softmax", "d": 4, "L": 5, "tau": 0.5, "x_b": [0] * 4, "x_s": [0] * 4,
                                  "x_l": [0] * 4, "w": [0] * 4, "b0": 0.0}))
    argv = [str(params) if a == "PARAMS" else str(tmp_path / "out") if a == "OUT" else a for a in argv]
    if argv[0] in ("train", "table2") and "--json" not in argv:
        argv += ["--json", str(tmp_path / "r.json")]
    asked = []  # every config field the message names, and the flag this command has for it
    flag_for = args.flag_for
    monkeypatch.setattr(args, "flag_for", lambda parser, field: asked.append((field, flag_for(parser, field)))
                        or asked[-1][1])
    if fragment == "--workers":  # argparse's own check of the option's type
        with pytest.raises(SystemExit) as info:
            run(argv)
        assert info.value.code == 2
    else:
        assert run(argv) == 2
        assert asked and all(flag for _, flag in asked), asked  # a field without a flag of this command
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err and "Traceback" not in err, err
    assert not (tmp_path / "r.json").exists()


def test_threads_caps_the_computing_commands_and_is_restored_after(tmp_path, monkeypatch):
    """``toy construct``, ``check``, ``rates``, ``lcap`` and ``figure1`` compute on the CPU and take --threads
    (issue 42: the shared options on every command they apply to): the torch threads inside the run are at
    most the given count, the process's own count is back after it, and a bad count is one line, exit 2."""
    import torch

    from countlens.toy import experiments as ex

    seen = []
    run_check = ex.run_check
    monkeypatch.setattr(ex, "run_check", lambda config: seen.append(torch.get_num_threads()) or run_check(config))
    params = tmp_path / "p.json"
    assert run(["construct", "--variant", "softmax", "--d", "4", "--L", "5", "--json", str(params),
                "--threads", "1"]) == 0
    before = torch.get_num_threads()
    assert run(["check", "--params", str(params), "--L", "5", "--threads", "1"]) == 0
    assert seen == [1] and torch.get_num_threads() == before
    for command in (["construct", "--variant", "softmax", "--d", "4", "--L", "5"], ["rates", "--L", "5"],
                    ["lcap", "--d", "3"], ["figure1", "--out", str(tmp_path / "f")]):
        assert run([*command, "--threads", "0"]) == 2
    assert not (tmp_path / "f").exists()


def test_malformed_parameter_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"variant": "softmax", "d": 4, "x_b": [1, 2]}')
    assert run(["check", "--params", str(bad), "--L", "5"]) == 2
    assert "parameter file" in capsys.readouterr().err
    bad.write_text("{not json")
    assert run(["check", "--params", str(bad), "--L", "5"]) == 2


def test_console_script_exit_code():
    proc = subprocess.run([sys.executable, "-m", "countlens", "toy", "construct", "--variant", "x", "--d", "4",
                           "--L", "3"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
