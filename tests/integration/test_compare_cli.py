"""`countlens compare`: toy constructions against a (synthetic) LLM capture, checked independently."""

import json

import numpy as np
import pytest
import torch

from countlens.analysis.experiments import CompareResult
from countlens.pipeline.cli import main
from countlens.toy.model import ToyParams, boundary_representation, full_domain
from tests.helpers.captures import PNG, assert_round_trip, write_capture
from tests.helpers.cli import assert_one_line_error

WINDOWS = ["--low", "1:5", "--high", "15:20", "--pca-counts", "1:20", "--arc-counts", "1:20"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    toys = root / "toys"
    for variant in ("linear", "softmax"):
        assert main(["toy", "construct", "--variant", variant, "--d", "4", "--L", "20", "--json",
                     str(toys / f"{variant}.json")]) == 0
    acts, n, seed = write_capture(root / "acts", range(0, 21))
    out = root / "out"
    assert main(["compare", "--toy", str(toys), "--acts", str(root / "acts"), "--toy-L", "20", "--out", str(out),
                 *WINDOWS]) == 0
    return root, json.loads((out / "compare.json").read_text()), acts, n


def _centroid_gap_ratio(C, low, high):
    lo = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(low[0], low[1])])
    hi = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(high[0], high[1])])
    return hi / lo


def test_compare_rows_match_independent_computations(setup):
    root, res, acts, n = setup
    labels = [r["label"] for r in res["rows"]]
    assert labels[:2] == ["linear", "softmax"] and labels[2].startswith("LLM ")
    assert [r["kind"] for r in res["rows"]] == ["toy", "toy"] + ["llm"] * 4
    # Toy side: h(n, m) straight from the model over the full domain, averaged over m per count.
    data = json.loads((root / "toys" / "softmax.json").read_text())
    cfg, params = ToyParams.from_dict(data, L=20)
    nn, mm = full_domain(20)
    with torch.no_grad():
        h = boundary_representation(cfg, params, nn, mm).numpy()
    C = np.stack([h[nn.numpy() == c].mean(axis=0) for c in range(21)])
    toy = res["rows"][1]
    assert toy["gap_ratio"] == pytest.approx(_centroid_gap_ratio(C, (1, 5), (15, 20)), rel=1e-6)
    a, b = C[1], C[20]
    cos = a @ b / np.linalg.norm(a) / np.linalg.norm(b)
    assert toy["arc_angle"] == pytest.approx(np.arccos(np.clip(cos, -1, 1)), rel=1e-5, abs=1e-7)
    assert toy["readout_norm"] == pytest.approx(np.linalg.norm(data["w"])) and toy["readout_passed"] is True
    # Linear attention is exactly linear in (n, m): a least-squares probe is exact, at no more than the
    # construction's own read-out norm.
    lin = res["rows"][0]
    assert lin["probe_best_acc"] == 1.0 and lin["probe_norm"] <= lin["readout_norm"] * (1 + 1e-9)
    # LLM side: location 2 of the capture, centroids pooled over both seeds.
    llm = next(r for r in res["rows"] if r["location"] == "blocks.1.hook_resid_post")
    C = np.stack([acts[n == c, 2].mean(axis=0) for c in range(21)])
    assert llm["gap_ratio"] == pytest.approx(_centroid_gap_ratio(C, (1, 5), (15, 20)), rel=1e-6)
    assert res["provenance"]["config"]["toy_L"] == 20
    out = root / "out"
    assert (out / "compare.png").read_bytes()[:8] == PNG
    assert (out / "compare.csv").read_text().splitlines()[0].startswith("label,kind,location,gap_ratio")


def test_compare_bad_input_exit_2(setup, capsys):
    root, *_ = setup
    acts, toys, out = str(root / "acts"), str(root / "toys"), str(root / "bad")
    assert main(["compare", "--toy", str(root / "missing.json"), "--acts", acts, "--out", out, *WINDOWS]) == 2
    assert "does not exist" in capsys.readouterr().err
    code = main(["compare", "--toy", toys, "--acts", acts, "--toy-L", "12", "--out", out, *WINDOWS])
    assert_one_line_error(code, capsys.readouterr().err, "toy linear: --pca-counts 1:20 needs counts 13:20",
                          "(or pass --toy-L >= 20)")
    code = main(["compare", "--toy", toys, "--acts", acts, "--out", out, "--locations", "embed,nope", *WINDOWS])
    assert_one_line_error(code, capsys.readouterr().err, "--locations: location 'nope' does not exist")
    for i, (tail, words) in enumerate(((["--toy-L", "0"], ("--toy-L must be >= 1",)),
                                       (["--arc-counts", "1:30"], ("--arc-counts 1:30 needs counts 21:30",
                                                                   "has counts 0:20")),
                                       (["--low", "0:25"], ("--low 0:25 needs counts 21:25", "has counts 0:20")))):
        code = main(["compare", "--toy", toys, "--acts", acts, "--out", f"{out}-{i}", *WINDOWS[:4], *tail])
        err = capsys.readouterr().err
        assert_one_line_error(code, err, *words)
        assert i < 1 or "--toy-L" not in err  # a window the capture cannot fill: no toy domain helps
    write_capture(root / "one", [4])
    assert main(["compare", "--toy", toys, "--acts", str(root / "one"), "--out", out, *WINDOWS]) == 2
    assert "one count only" in capsys.readouterr().err
    assert not (root / "bad" / "compare.json").exists()


def test_unset_domain_and_spans_follow_the_capture(setup):
    """Unset, `--toy-L` is the capture's largest count (20) and `--arc-counts`/`--pca-counts` the paper's 1..100
    within the counts every source holds (1..20): the run equals the one that passes them."""
    root, res, *_ = setup
    out = root / "defaults"
    assert main(["compare", "--toy", str(root / "toys"), "--acts", str(root / "acts"), "--out", str(out),
                 "--low", "1:5", "--high", "15:20"]) == 0
    again = json.loads((out / "compare.json").read_text())
    assert again["toy_L"] == 20 and again["arc_counts"] == [1, 20] and again["pca_counts"] == [1, 20]
    assert again["provenance"]["config"]["toy_L"] is None  # the config as given
    for a, b in zip(again["rows"], res["rows"], strict=True):
        assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
    assert_round_trip(CompareResult.read(out))


def test_a_toy_export_folder_is_a_source_with_its_read_out(setup, capsys):
    root, res, *_ = setup
    out = root / "from-export"
    assert main(["compare", "--toy", str(root / "out" / "toy-acts" / "softmax"), "--acts", str(root / "acts"),
                 "--out", str(out), *WINDOWS]) == 0
    row = json.loads((out / "compare.json").read_text())["rows"][0]
    data = json.loads((root / "toys" / "softmax.json").read_text())
    assert row["label"] == "softmax" and row["readout_norm"] == pytest.approx(np.linalg.norm(data["w"]))
    assert row["readout_passed"] is None  # an export records its parameters, not their check
    assert row["gap_ratio"] == res["rows"][1]["gap_ratio"]
    # A folder of parameter files may hold other JSON (reproduce's stage.json): those are skipped.
    mixed = root / "mixed"
    mixed.mkdir()
    (mixed / "linear.json").write_text((root / "toys" / "linear.json").read_text())
    (mixed / "stage.json").write_text(json.dumps({"stage": "toy-construct", "status": "done"}))
    assert main(["compare", "--toy", str(mixed), "--acts", str(root / "acts"), "--out", str(root / "mixed-out"),
                 *WINDOWS]) == 0
    rows = json.loads((root / "mixed-out" / "compare.json").read_text())["rows"]
    assert [r["label"] for r in rows if r["kind"] == "toy"] == ["linear"]
