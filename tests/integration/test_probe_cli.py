"""`countlens probe`, `probe sweep` and `probe toy-acts` end to end on real files."""

import json

import datasets
import numpy as np
import pytest
from sklearn.linear_model import Ridge

from countlens.core.store import ActivationWriter, features
from countlens.pipeline.cli import main
from countlens.probes.metrics import rounded_accuracy
from countlens.probes.probe import ProbeResult
from countlens.probes.splits import split_rows
from countlens.toy.model import ToyConfig, init_params

NAMES = ["embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
PNG = b"\x89PNG\r\n\x1a\n"


def _synthetic_capture(path, rows=360, d=12, seed=0):
    """LLM-shaped capture: location 0 noise, 1 noisy count direction, 2 count direction (two shards)."""
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 30, size=rows)
    m = rng.integers(0, 10, size=rows)
    direction = rng.normal(size=d)
    acts = np.stack([rng.normal(size=(rows, d)),
                     np.outer(n, direction) * 0.3 + rng.normal(size=(rows, d)) * 0.3,
                     np.outer(n, direction) + rng.normal(size=(rows, d)) * 0.01], axis=1)
    writer = ActivationWriter(path, {"locations": NAMES, "d": d, "model": "synthetic", "L": 40,
                                     "settings": {"seed": seed}})
    half = rows // 2
    for index, part in enumerate((slice(0, half), slice(half, rows))):
        k = len(range(rows)[part])
        writer.write_shard(index, {"acts": acts[part], "n": n[part].tolist(), "m": m[part].tolist(),
                                   "pair": ["a/b"] * k, "config": ["count"] * k, "seed": [0] * k,
                                   "prompt": ["p"] * k, "boundary_index": [9] * k,
                                   "n_tokens": (n[part] + m[part] + 10).tolist()})
    writer.finish()
    return path, acts, n.astype(float)


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_probe_writes_results_that_a_loop_of_sklearn_fits_reproduces(tmp_path, capsys):
    acts_dir, acts, n = _synthetic_capture(tmp_path / "acts")
    out = tmp_path / "out"
    code, stdout, _ = _run(["probe", "--acts", str(acts_dir), "--alphas", "1e-3:1e3:13", "--seeds", "0,1",
                            "--out", str(out)], capsys)
    assert code == 0 and "best by validation: blocks.1.hook_resid_post" in stdout
    result = json.loads((out / "probes.json").read_text())
    assert result["provenance"]["config"]["seeds"] == [0, 1] and result["best_location"] == NAMES[2]
    assert ProbeResult.read(out).locations[1].fits[0].alpha == result["locations"][1]["fits"][0]["alpha"]
    loc = result["locations"][1]
    fit = loc["fits"][0]
    for key in ("alpha", "val_rounded_acc", "test_rounded_acc", "r2", "coef_norm"):
        assert key in fit
    # independent: standardise on the training rows, one sklearn Ridge per alpha, select on validation
    train, val, test = split_rows(len(n), 0)
    X = acts[:, 1, :].astype(np.float32).astype(np.float64)  # the capture stores float32
    mean, scale = X[train].mean(0), X[train].std(0)
    best = None
    for alpha in np.logspace(-3, 3, 13):
        model = Ridge(alpha=alpha, solver="svd").fit((X[train] - mean) / scale, n[train])
        pred = model.predict((X[val] - mean) / scale)
        key = (-rounded_accuracy(n[val], pred), float(np.mean((pred - n[val]) ** 2)), alpha)
        if best is None or key < best[0]:
            best = (key, model)
    assert fit["alpha"] == pytest.approx(best[0][2])
    pred_test = best[1].predict((X[test] - mean) / scale)
    assert fit["test_rounded_acc"] == pytest.approx(rounded_accuracy(n[test], pred_test))
    assert fit["coef_norm"] == pytest.approx(np.linalg.norm(best[1].coef_ / scale), rel=1e-6)
    assert loc["test_rounded_acc_mean"] == pytest.approx(np.mean([f["test_rounded_acc"] for f in loc["fits"]]))
    csv_lines = (out / "probes.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 3 * 2 and csv_lines[0].startswith("location,index,seed,alpha")
    for stem in ("fig7_binned_accuracy", "probes_layerwise"):
        assert (out / f"{stem}.png").read_bytes()[:8] == PNG and (out / f"{stem}.pdf").stat().st_size > 0
    # figures are redrawn from the JSON alone
    code, _, _ = _run(["probe", "redraw", "--result", str(out / "probes.json"), "--figure-locations",
                       "embed,blocks.1.hook_resid_post", "--out", str(tmp_path / "again")], capsys)
    assert code == 0 and (tmp_path / "again" / "fig7_binned_accuracy.png").read_bytes()[:8] == PNG


def test_sweep_and_toy_acts(tmp_path, capsys):
    acts_dir, acts, n = _synthetic_capture(tmp_path / "acts")
    code, stdout, _ = _run(["probe", "sweep", "--acts", str(acts_dir), "--alphas", "0.01:100:5", "--seeds", "0,1,2",
                            "--out", str(tmp_path / "sweep")], capsys)
    assert code == 0
    sweep = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert sweep["location"] == "blocks.0.hook_resid_post" and len(sweep["seeds"]) == 3
    assert len(sweep["seeds"][0]["coef_norm"]) == 5
    assert (tmp_path / "sweep" / "fig8_norm_sweep.png").read_bytes()[:8] == PNG
    (tmp_path / "sweep" / "fig8_norm_sweep.png").unlink()
    assert _run(["probe", "redraw", "--result", str(tmp_path / "sweep" / "sweep.json")], capsys)[0] == 0
    assert (tmp_path / "sweep" / "fig8_norm_sweep.png").read_bytes()[:8] == PNG
    # the toy: parameters -> capture folder -> probes and sweep, with the same commands
    cfg = ToyConfig("linear", d=4, L=20)
    params_file = tmp_path / "toy.json"
    params_file.write_text(json.dumps({**init_params(cfg, seed=3).to_dict(cfg), "L": 20}))
    toy_dir = tmp_path / "toy_acts"
    assert _run(["probe", "toy-acts", "--params", str(params_file), "--out", str(toy_dir)], capsys)[0] == 0
    assert _run(["probe", "--acts", str(toy_dir), "--locations", "h", "--alphas", "1e-8:1:5", "--classifier",
                 "--classifier-C", "100,0.01", "--out", str(tmp_path / "toy_probe")], capsys)[0] == 0
    toy = json.loads((tmp_path / "toy_probe" / "probes.json").read_text())
    # linear attention is linear in (n, m): a probe on h counts every held-out pair exactly
    assert toy["locations"][0]["test_rounded_acc_min"] == 1.0
    clf = toy["locations"][0]["fits"][0]["classifier"]
    assert clf["C"] in (0.01, 100.0) and clf["C_grid"] == [0.01, 100.0] and 0 <= clf["test_acc"] <= 1 and clf["class_norm_max"] > 0
    assert "classifier_test_acc" in (tmp_path / "toy_probe" / "probes.csv").read_text().splitlines()[0]
    assert _run(["probe", "sweep", "--acts", str(toy_dir), "--out", str(tmp_path / "toy_sweep")], capsys)[0] == 0
    assert json.loads((tmp_path / "toy_sweep" / "sweep.json").read_text())["location"] == "h"


def _raw_capture(path, columns, acts):
    """A capture folder written without the writer's checks (to hold what it would refuse)."""
    rows = len(acts)
    data = {"acts": acts, "n": [1] * rows, "m": [0] * rows, "pair": ["a"] * rows, "config": ["c"] * rows,
            "seed": [0] * rows, "prompt": [""] * rows, "boundary_index": [0] * rows, "n_tokens": [1] * rows}
    data = {k: v for k, v in data.items() if k in columns}
    feats = datasets.Features({k: v for k, v in features(acts.shape[1], acts.shape[2]).items() if k in columns})
    datasets.Dataset.from_dict(data, features=feats).save_to_disk(str(path / "shards" / "00000"))
    (path / "meta.json").write_text(json.dumps({"locations": ["embed"], "d": acts.shape[2], "complete": True}))
    return path


@pytest.mark.parametrize("case,argv_tail,message", [
    ("no-count", [], "no 'n' (count)"),
    ("nan", [], "NaN or inf"),
    ("few", [], "split (--split) needs at least 5; capture more prompts"),
    ("ok", ["--alphas=-1,1"], "--alphas must be finite and >= 0"),
    ("ok", ["--alphas", "0:1:5"], "lo, hi > 0"),
    ("ok", ["--seeds", "x"], "--seeds takes integers"),
    ("ok", ["--locations", "blocks.7.hook_resid_post"], "--locations: location 'blocks.7.hook_resid_post' does not"),
    ("ok", ["--figure-locations", "nope"], "--figure-locations: location 'nope' does not exist"),
    ("ok", ["--split", "0.5,0.5"], "--split must be three fractions"),
    ("ok", ["--split", "0.5,0.6,0.2"], "--split (train/validation/test) must be >= 0"),
    ("ok", ["--split", "0.8,0.2,0"], "--split must be three fractions (train, validation, test) with test > 0"),
    ("ok", ["--blas-threads", "-2"], "--blas-threads must be >= 1"),
    ("ok", ["--classifier", "--classifier-C", "1,0"], "--classifier-C values must be finite and > 0"),
    ("ok", ["--classifier", "--classifier-C", "big"], "--classifier-C must be a comma-separated list"),
    ("missing", [], "not a countlens activation folder"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, case, argv_tail, message):
    acts = np.random.default_rng(0).normal(size=(30, 1, 3)).astype(np.float32)
    if case == "no-count":
        acts_dir = _raw_capture(tmp_path / "acts", ["acts", "m", "pair"], acts)
    elif case == "nan":
        acts[3, 0, 1] = np.nan
        acts_dir = _raw_capture(tmp_path / "acts", ["acts", "n", "m"], acts)
    elif case == "few":
        acts_dir = _raw_capture(tmp_path / "acts", ["acts", "n", "m"], acts[:3])
    elif case == "ok":
        acts_dir = _raw_capture(tmp_path / "acts", ["acts", "n", "m"], acts)
    else:
        acts_dir = tmp_path / "nothing"
    out = tmp_path / "out"
    code, stdout, err = _run(["probe", "--acts", str(acts_dir), "--out", str(out), *argv_tail], capsys)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (out / "probes.json").exists()


def test_sweep_and_toy_acts_bad_input(tmp_path, capsys):
    acts_dir, _, _ = _synthetic_capture(tmp_path / "acts", rows=40)
    code, _, err = _run(["probe", "sweep", "--acts", str(acts_dir), "--location", "nope", "--out",
                         str(tmp_path / "o")], capsys)
    assert code == 2 and "--location: location 'nope' does not exist" in err
    code, _, err = _run(["probe", "sweep", "--acts", str(acts_dir), "--split", "0.5,0.6,0.2", "--out",
                         str(tmp_path / "o")], capsys)
    assert code == 2 and "--split (train/validation/test) must be" in err  # the sweep's own flag
    code, _, err = _run(["probe", "--acts", str(acts_dir), "sweep", "--alphas=-1", "--out", str(tmp_path / "o")],
                        capsys)
    assert code == 2 and "--alphas must be finite and >= 0" in err
    code, _, err = _run(["probe", "sweep", "--location", "1", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "--acts is required" in err
    cfg = ToyConfig("softmax", d=3, L=5)
    params = {k: v for k, v in init_params(cfg).to_dict(cfg).items() if k != "L"}  # a file that does not say L
    (tmp_path / "p.json").write_text(json.dumps(params))
    code, _, err = _run(["probe", "toy-acts", "--params", str(tmp_path / "p.json"), "--out", str(tmp_path / "t")],
                        capsys)
    assert code == 2 and "pass --L" in err


def test_help_shows_required_flags_defaults_and_why_the_grids_differ(capsys):
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    text = capsys.readouterr().out
    assert "usage: countlens probe --acts DIR --out DIR" in text and "required:\n  --acts DIR" in text
    assert "1e-6:1e4:41" in text and "1e-6:1e6:49" in text and "differ on purpose" in text
    for flag in ("--seeds", "--split", "--classifier-C", "--blas-threads"):
        assert flag in text
    assert text.count("(default:") >= 8
    with pytest.raises(SystemExit):
        main(["probe", "sweep", "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: countlens probe sweep") and "(default: 1e-6:1e6:49)" in " ".join(text.split())


def test_a_finished_probe_run_leaves_no_resume_files(tmp_path, capsys):
    acts_dir, _, _ = _synthetic_capture(tmp_path / "acts", rows=120)
    out = tmp_path / "out"
    code, stdout, _ = _run(["probe", "--acts", str(acts_dir), "--alphas", "1e-2:1e2:5", "--seeds", "0",
                            "--out", str(out)], capsys)
    assert code == 0 and "(after block 2;" in stdout and "train/validation/test 72/24/24" in stdout
    assert not (out / "partial").exists()
    assert json.loads((out / "probes.json").read_text())["config"]["split_sizes"] == {
        "train": 72, "validation": 24, "test": 24}


def test_running_count_probes_end_to_end_and_redrawn(tmp_path, capsys):
    from tests.helpers.captures import write_items_capture

    write_items_capture(tmp_path / "items", counts=range(0, 7), distractors=(0, 4), reps=3)
    out = tmp_path / "rc"
    code, stdout, _ = _run(["probe", "--acts", str(tmp_path / "items"), "--target", "running_count",
                            "--position-buckets", "3", "--alphas", "1e-2:1e2:5", "--seeds", "0", "--out", str(out)],
                           capsys)
    assert code == 0 and "running-count probes at 3 location(s) x 3 position bucket(s) + boundary" in stdout
    assert "best by validation: blocks.0.hook_resid_post" in stdout
    saved = json.loads((out / "running_count.json").read_text())
    assert saved["config"]["rows"].startswith("item rows and boundary rows") and len(saved["buckets"]) == 4
    assert saved["provenance"]["config"]["target"] == "running_count"
    assert (out / "running_count.csv").read_text().startswith("location,index,target,bucket")
    assert (out / "fig10_running_count.png").read_bytes()[:8] == PNG and not (out / "partial-running").exists()
    assert not (out / "probes.json").exists()
    code, _, _ = _run(["probe", "redraw", "--result", str(out / "running_count.json"), "--out", str(tmp_path / "again")],
                      capsys)
    assert code == 0 and (tmp_path / "again" / "fig10_running_count.png").read_bytes()[:8] == PNG
    # the default target on the same capture is Figure 7 on its boundary rows
    code, stdout, _ = _run(["probe", "--acts", str(tmp_path / "items"), "--alphas", "1e-2:1e2:5", "--seeds", "0",
                            "--out", str(tmp_path / "fig7")], capsys)
    assert code == 0 and f"on {saved['source']['prompts']} rows" in stdout


@pytest.mark.parametrize("argv_tail,message", [
    (["--target", "running_count"], "--target running_count needs an items capture"),
    (["--target", "count"], "--target must be one of n, running_count, got 'count'"),
    (["--target", "running_count", "--position-buckets", "0"], "--position-buckets must be >= 1"),
    (["--target", "running_count", "--figure-locations", "1"], "--figure-locations is Figure 7's"),
])
def test_running_count_bad_input_is_one_line_exit_2_before_any_fit(tmp_path, capsys, argv_tail, message):
    acts_dir, _, _ = _synthetic_capture(tmp_path / "acts", rows=40)  # a boundary capture
    out = tmp_path / "out"
    code, _, err = _run(["probe", "--acts", str(acts_dir), "--out", str(out), *argv_tail], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
