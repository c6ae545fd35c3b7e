"""Toy representations written in the capture format, read back through the LLM store's reader."""

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError, UsageError
from countlens.core.io import config_digest
from countlens.core.store import load_capture, read_meta
from countlens.probes.data import load_probe_data
from countlens.toy.export import export_toy_activations
from countlens.toy.model import ToyConfig, init_params, layer_norm, read_params


@pytest.mark.parametrize("variant", ["linear", "softmax", "softmax-postln-learned"])
def test_export_matches_explicit_attention(tmp_path, variant):
    cfg = ToyConfig(variant, d=5, L=7)
    params = init_params(cfg, seed=1, scale=2.0)
    if cfg.ln_learned:
        params.gamma = params.gamma * 1.5
        params.beta = params.beta + 0.1
    out = export_toy_activations(cfg, params, tmp_path / "acts", seed=4)
    ds = load_capture(out)
    meta = read_meta(out)
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


def test_read_params_reads_the_one_schema_and_says_what_is_missing():
    cfg = ToyConfig("softmax-postln-bare", d=3, L=12)
    flat = init_params(cfg, seed=2).to_dict(cfg)
    assert flat["L"] == 12 and {"variant", "d", "tau", "readout", "x_b", "w", "b0"} <= set(flat)
    got = read_params(flat)
    assert got.cfg == cfg and torch.equal(got.params.x_s, init_params(cfg, seed=2).x_s)
    assert got.check is None and got.passed is None
    assert read_params(flat, L=4).cfg.L == 4  # the caller's domain wins over the file's
    checked = read_params({**flat, "check": {"passed": True, "worst_error": 0.1, "L": 12}})
    assert checked.passed is True and checked.check["L"] == 12
    no_L = {k: v for k, v in flat.items() if k != "L"}
    assert read_params({"L": 30, "params": no_L}).cfg.L == 30  # countlens 0.1's `toy train`: nested
    clf_cfg = ToyConfig("softmax", d=3, L=6, readout="classification")
    clf = {k: v for k, v in init_params(clf_cfg, seed=0).to_dict(clf_cfg).items() if k != "L"}
    assert read_params(clf).cfg.L == 6 and read_params(clf, L=20).cfg.L == 20  # U fixes its own
    with pytest.raises(ConfigError, match="pass L") as info:
        read_params(no_L)
    assert info.value.field == "L"
    with pytest.raises(ConfigError) as info:
        read_params(flat, L=0)
    assert info.value.field == "L"
    with pytest.raises(UsageError, match="no toy parameters"):
        read_params({"rows": []})
    with pytest.raises(UsageError, match="parameter file: variant must be one of"):
        read_params({**flat, "variant": "nope"})  # a value of the file: not a field of the caller's config


def test_the_export_digest_names_the_vectors_not_the_domain(tmp_path):
    cfg = ToyConfig("softmax", d=4, L=5)
    params = init_params(cfg, seed=0)
    out = export_toy_activations(cfg, params, tmp_path / "acts")
    old = {k: v for k, v in params.to_dict(cfg).items() if k != "L"}  # the dict countlens 0.1 digested
    assert read_meta(out)["settings"]["params_sha256"] == config_digest(old, length=16)
