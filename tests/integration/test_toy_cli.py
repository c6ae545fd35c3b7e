"""`countlens toy ...` end to end: real files, the JSON keys other tools read, one-line errors."""

import json
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("argv, fragment", [
    (["construct", "--variant", "nope", "--d", "16", "--L", "10"], "unknown variant"),
    (["construct", "--variant", "softmax", "--d", "16", "--L", "0"], "--L must be >= 1"),
    (["construct", "--variant", "softmax-postln-bare", "--d", "2", "--L", "10"], "--d must be >= 3"),
    (["construct", "--variant", "softmax-preln-bare", "--d", "4", "--L", "40"], "infeasible"),
    (["lcap", "--d", "2"], "--d must be >= 3"),
    (["rates", "--L", "0,10"], "--L values must be >= 1"),
    (["table3", "--attained", "--attained-parametrization", "spherical"], "unknown parametrization"),
])
def test_bad_input_is_one_line_exit_2(argv, fragment, capsys):
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err and "Traceback" not in err


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
