"""`countlens geometry` on a capture folder written with the shared activation store."""

import json

import numpy as np
import pytest

from countlens.analysis.experiments import GeometryResult
from countlens.analysis.figures import plot_figure5, plot_figure6
from countlens.core.io import save_figure
from countlens.pipeline.cli import main
from tests.helpers.captures import PNG, write_capture


def test_geometry_writes_json_csv_and_figures(tmp_path):
    acts, n, seed = write_capture(tmp_path / "acts", range(0, 21))
    out = tmp_path / "geo"
    assert main(["geometry", "--acts", str(tmp_path / "acts"), "--out", str(out), "--low", "1:5",
                 "--high", "15:20", "--pca-counts", "1:20"]) == 0
    g = json.loads((out / "geometry.json").read_text())
    assert g["provenance"]["config"]["high"] == [15, 20]
    assert [r["name"] for r in g["per_location"]][:2] == ["embed", "blocks.0.hook_resid_post"]
    # Independent recomputation of location 2, seed 1: centroid loop, gap loop.
    C = np.stack([acts[(seed == 1) & (n == c), 2].mean(axis=0) for c in range(21)])
    lo = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(1, 5)])
    hi = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(15, 20)])
    assert g["per_location"][2]["gap_ratio_per_seed"]["1"] == pytest.approx(hi / lo, rel=1e-6)
    assert [p["index"] for p in g["pca"]] == [0, 1, 2, 3]
    for stem in ("figure5", "figure6"):
        assert (out / f"{stem}.png").read_bytes()[:8] == PNG
        assert (out / f"{stem}.pdf").read_bytes()[:4] == b"%PDF"
    lines = (out / "figure5.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("location,name,gap_ratio")
    assert len((out / "figure6.csv").read_text().splitlines()) == 1 + 4 * 20
    # The figures redraw from the JSON alone (nan ratios, stored as "nan", included).
    g["per_location"][0]["gap_ratio"] = "nan"
    result = GeometryResult.from_dict(g)
    for plot in (plot_figure5, plot_figure6):
        assert save_figure(plot(result), tmp_path / "redrawn")[0].read_bytes()[:8] == PNG


def test_geometry_bad_input_exit_2(tmp_path, capsys):
    write_capture(tmp_path / "acts", range(0, 21))
    acts = str(tmp_path / "acts")
    assert main(["geometry", "--acts", acts, "--out", str(tmp_path / "o")]) == 2  # default 91..100 absent
    err = capsys.readouterr().err
    assert "high window 91..100 needs counts 91:100" in err and "has counts 0:20" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "geometry.json").exists()
    assert main(["geometry", "--acts", acts, "--out", str(tmp_path / "o"), "--low", "5:2"]) == 2
    assert main(["geometry", "--acts", acts, "--out", str(tmp_path / "o"), "--low", "1:5", "--high", "15:20",
                 "--pca-counts", "1:20", "--pca-locations", "9"]) == 2
    assert "location 9 does not exist" in capsys.readouterr().err
    write_capture(tmp_path / "one", [7])
    assert main(["geometry", "--acts", str(tmp_path / "one"), "--out", str(tmp_path / "o")]) == 2
    assert "one count only (7)" in capsys.readouterr().err
    assert main(["geometry", "--acts", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2
