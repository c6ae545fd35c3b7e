"""Every attained entry of Table 3 carries its trained parameters, and `countlens toy check` re-checks them."""

import json

from countlens.pipeline.cli import main


def test_attained_parameters_recheck_with_toy_check(tmp_path):
    out = tmp_path / "table3.json"
    argv = ["toy", "table3", "--B", "10", "--attained", "--attained-grid", "10,20", "--attained-steps", "150",
            "--json", str(out)]
    assert main(argv) == 0
    rows = json.loads(out.read_text())["variants"]
    checked = 0
    for v, row in rows.items():
        assert len(row["attained_params"]) == len(row["B"]) == len(row["attained_next_failing_worst_error"])
        L, params = row["attained"][0], row["attained_params"][0]
        if L == 0:
            assert params is None
            continue
        assert params["variant"] == v
        pfile, cfile = tmp_path / f"{v}.json", tmp_path / f"{v}.check.json"
        pfile.write_text(json.dumps(params))
        assert main(["toy", "check", "--params", str(pfile), "--L", str(L), "--json", str(cfile)]) == 0
        res = json.loads(cfile.read_text())
        assert res["passed"] and res["max_norm"] <= 10 * (1 + 1e-12) and res["L"] == L
        checked += 1
    assert checked >= 2
