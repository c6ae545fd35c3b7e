"""Toy representations written in the capture format, read back through the LLM store's reader."""

import numpy as np
import pytest
import torch

from countlens.core.errors import UsageError
from countlens.core.store import capture_meta, load_capture
from countlens.probes.experiments import load_probe_data
from countlens.toy.export import export_toy_activations, toy_params_from_json
from countlens.toy.model import ToyConfig, init_params, layer_norm


@pytest.mark.parametrize("variant", ["linear", "softmax", "softmax-postln-learned"])
def test_export_matches_explicit_attention(tmp_path, variant):
    cfg = ToyConfig(variant, d=5, L=7)
    params = init_params(cfg, seed=1, scale=2.0)
    if cfg.ln_learned:
        params.gamma = params.gamma * 1.5
        params.beta = params.beta + 0.1
    out = export_toy_activations(cfg, params, tmp_path / "acts", seed=4)
    ds = load_capture(out)
    meta = capture_meta(ds)
    assert meta["locations"] == ["attn_out", "h"] and meta["d"] == 5 and meta["complete"]
    assert len(ds) == (7 + 1) * (7 + 2) // 2
    acts = load_probe_data(out).acts  # (rows, 2, d), float64 as stored
    assert acts.dtype == np.float64
    z = torch.stack([params.x_b, params.x_s, params.x_l]).numpy()  # (3, d)
    for row, (n, m) in enumerate(zip(ds["n"], ds["m"], strict=True)):
        assert n + m <= 7 and ds[row]["n_tokens"] == 1 + n + m
        # explicit attention over a token sequence b, s * n, l * m (the boundary attends to itself)
        seq = np.array([z[0]] + [z[1]] * n + [z[2]] * m)  # (1+n+m, d)
        scores = cfg.tau * seq @ z[0]
        if cfg.attention == "softmax":
            weights = np.exp(scores - scores.max())
            weights /= weights.sum()
        else:
            weights = scores
        o = weights @ seq
        h = o
        if cfg.ln_place == "post":
            h = layer_norm(torch.as_tensor(o), cfg.eps).numpy()
            if cfg.ln_learned:
                h = params.gamma.numpy() * h + params.beta.numpy()
        np.testing.assert_allclose(acts[row, 0], o, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(acts[row, 1], h, rtol=1e-10, atol=1e-12)
    assert set(ds["pair"]) == {"toy"} and set(ds["config"]) == {variant} and set(ds["seed"]) == {4}
    assert set(ds["boundary_index"]) == {0} and set(ds["prompt"]) == {""}


def test_export_resumes_and_refuses_other_settings(tmp_path):
    cfg = ToyConfig("softmax", d=4, L=5)
    params = init_params(cfg, seed=0)
    out = export_toy_activations(cfg, params, tmp_path / "acts")
    stamp = (out / "meta.json").stat().st_mtime_ns
    assert export_toy_activations(cfg, params, out) == out  # finished: left as it is
    assert (out / "meta.json").stat().st_mtime_ns == stamp
    with pytest.raises(UsageError, match="other settings"):
        export_toy_activations(cfg, init_params(cfg, seed=1), out)
    longer = export_toy_activations(cfg, params, tmp_path / "longer", L=9)
    assert len(load_capture(longer)) == 10 * 11 // 2


def test_params_from_json_flat_nested_and_missing_length():
    cfg = ToyConfig("softmax-postln-bare", d=3, L=12)
    flat = init_params(cfg, seed=2).to_dict(cfg)
    got_cfg, got = toy_params_from_json({**flat, "L": 12})
    assert got_cfg.L == 12 and torch.equal(got.x_s, init_params(cfg, seed=2).x_s)
    assert toy_params_from_json({"L": 30, "params": flat})[0].L == 30  # training output: outer L
    assert toy_params_from_json({"config": {"L": 8}, "params": flat})[0].L == 8
    assert toy_params_from_json(flat, L=4)[0].L == 4
    clf_cfg = ToyConfig("softmax", d=3, L=6, readout="classification")
    clf = init_params(clf_cfg, seed=0).to_dict(clf_cfg)
    assert toy_params_from_json(clf)[0].L == 6 and toy_params_from_json(clf, L=20)[0].L == 20
    with pytest.raises(UsageError, match="pass --L"):
        toy_params_from_json(flat)
    with pytest.raises(UsageError, match="no toy parameters"):
        toy_params_from_json({"rows": []})
