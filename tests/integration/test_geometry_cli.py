"""`countlens geometry` on a capture folder written with the shared activation store."""

import json

import numpy as np
import pytest

from countlens.analysis.experiments import GeometryConfig, GeometryResult, run_geometry
from countlens.analysis.figures import plot_figure5, plot_figure6
from countlens.core.io import save_figure
from countlens.pipeline.cli import main
from tests.helpers.captures import PNG, assert_round_trip, write_capture
from tests.helpers.cli import assert_one_line_error


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
    code = main(["geometry", "--acts", acts, "--out", str(tmp_path / "o")])  # the default high window 91..100
    assert_one_line_error(code, capsys.readouterr().err, "--high 91:100 needs counts 91:100", "has counts 0:20")
    assert not (tmp_path / "o" / "geometry.json").exists()
    assert main(["geometry", "--acts", acts, "--out", str(tmp_path / "o"), "--low", "5:2"]) == 2
    assert "--low must be lo:hi" in capsys.readouterr().err
    windows = ["--low", "1:5", "--high", "15:20"]
    for tail, words in ((["--pca-counts", "1:20", "--pca-locations", "9"], ("--pca-locations: location 9 does not",)),
                        (["--pca-counts", "0:30"], ("--pca-counts 0:30 needs counts 21:30", "has counts 0:20")),
                        (["--low", "1:25"], ("--low 1:25 needs counts 21:25",))):
        code = main(["geometry", "--acts", acts, "--out", str(tmp_path / "o"), *windows, *tail])
        assert_one_line_error(code, capsys.readouterr().err, *words)
    write_capture(tmp_path / "one", [7])
    assert main(["geometry", "--acts", str(tmp_path / "one"), "--out", str(tmp_path / "o")]) == 2
    assert "one count only (7)" in capsys.readouterr().err
    assert main(["geometry", "--acts", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2


def test_unset_pca_counts_follow_the_capture(tmp_path, capsys):
    """Regression (issue 20): on a capture of counts 1..24, `--low 1:4 --high 20:23` failed on the default
    `--pca-counts 1:100`; unset, the PCA counts are the paper's 1..100 within the counts the capture holds."""
    acts, n, _ = write_capture(tmp_path / "acts", range(1, 25))
    out = tmp_path / "geo"
    assert main(["geometry", "--acts", str(tmp_path / "acts"), "--low", "1:4", "--high", "20:23",
                 "--out", str(out)]) == 0
    g = json.loads((out / "geometry.json").read_text())
    assert g["pca_counts"] == [1, 24] and g["pca"][0]["counts"] == list(range(1, 25))
    assert g["provenance"]["config"]["pca_counts"] is None  # the config as given: unset
    assert len((out / "figure6.csv").read_text().splitlines()) == 1 + 4 * 24
    result = run_geometry(GeometryConfig(tmp_path / "acts", low=(1, 4), high=(20, 23)))
    assert result.pca_counts == [1, 24] and result.per_location == g["per_location"]
    again = assert_round_trip(result)
    assert GeometryResult.read(out).per_location == again.per_location
