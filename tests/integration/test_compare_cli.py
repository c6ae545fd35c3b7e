"""`countlens compare`: toy constructions against a (synthetic) LLM capture, checked independently."""

import json

import numpy as np
import pytest
import torch

from countlens.pipeline.cli import main
from countlens.toy.model import ToyParams, boundary_representation, full_domain
from tests.helpers.captures import PNG, write_capture

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
    assert main(["compare", "--toy", toys, "--acts", acts, "--toy-L", "12", "--out", out, *WINDOWS]) == 2
    err = capsys.readouterr().err
    assert "needs counts 13:20" in err and "--toy-L >= 20" in err
    assert main(["compare", "--toy", toys, "--acts", acts, "--out", out, "--locations", "embed,nope",
                 *WINDOWS]) == 2
    assert "location 'nope' does not exist" in capsys.readouterr().err
    write_capture(root / "one", [4])
    assert main(["compare", "--toy", toys, "--acts", str(root / "one"), "--out", out, *WINDOWS]) == 2
    assert "one count only" in capsys.readouterr().err
    assert not (root / "bad" / "compare.json").exists()
