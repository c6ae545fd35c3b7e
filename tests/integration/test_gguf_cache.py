"""The GGUF cache on tiny GGUF files written by the tests: the first load converts the vocabulary and dequantises
the weights once, later loads read the cached copies (and give the same tokens and logits as loading the file
afresh), a changed file is never served a stale entry, an interrupted conversion leaves nothing behind, a
disk without room falls back to no cache in one line, and ``--no-cache`` writes nothing."""

from __future__ import annotations

import os

import numpy as np
import pytest

from countlens.llm import acts_array, load_capture, models
from countlens.llm.models import ModelSpec, load_model, load_tokenizer, model_pool
from countlens.pipeline.cli import main
from tests.helpers.tiny_gguf import write_tiny_gguf

SMALL = ["--L", "8", "--counts", "0,3,8", "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--quiet"]
TEXTS = ["Count the a in: a b a", " cat dog red blue", "How many are there?"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("COUNTLENS_CACHE", str(folder))
    return folder


@pytest.fixture
def loads(monkeypatch):
    """Every ``from_pretrained`` call of a model: (where, whether from the GGUF file)."""
    import transformers

    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, location, *args, **kwargs):
        seen.append((str(location), "gguf_file" in kwargs))
        return real(cls, location, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    return seen


def logits(loaded) -> np.ndarray:
    import torch

    ids = loaded.tokenizer(TEXTS[0], return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        return loaded.model(ids).logits.float().numpy()


def tokens(tokenizer) -> list:
    chat = tokenizer.apply_chat_template([{"role": "user", "content": TEXTS[0]}], tokenize=False,
                                         add_generation_prompt=True)
    return [tokenizer(t)["input_ids"] for t in TEXTS] + [chat, tokenizer.eos_token, tokenizer.pad_token]


def test_converted_once_then_served_from_the_cache(tmp_path, cache, loads):
    path = write_tiny_gguf(tmp_path / "m.gguf")
    first = load_model(str(path), progress=False)
    entry = models.resolve_model(str(path)).cache.path
    assert (entry / "tokenizer" / "tokenizer.json").is_file() and (entry / "weights" / "config.json").is_file()
    assert first.location == str(entry / "weights")
    assert [g for _, g in loads] == [True, False]  # dequantised once from the file, then read from the copy
    loads.clear()
    second = load_model(str(path), progress=False)
    assert [g for _, g in loads] == [False]  # no conversion at all
    fresh = load_model(str(path), progress=False, no_cache=True)
    np.testing.assert_array_equal(logits(second), logits(fresh))
    np.testing.assert_array_equal(logits(first), logits(fresh))
    assert tokens(second.tokenizer) == tokens(fresh.tokenizer)
    assert second.source == fresh.source and second.model_id == fresh.model_id
    assert not [p for p in entry.parent.rglob(".*") if p.name != ".lock"]  # no temporary folder left


def test_a_changed_file_is_never_served_a_stale_entry(tmp_path, cache):
    path = write_tiny_gguf(tmp_path / "m.gguf")
    old = load_model(str(path), progress=False)
    old_entry = models.resolve_model(str(path)).cache.path
    stat = os.stat(path)
    write_tiny_gguf(path, seed=1)  # other weights; same header, same size
    assert os.stat(path).st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    new = load_model(str(path), progress=False)
    fresh = load_model(str(path), progress=False, no_cache=True)
    np.testing.assert_array_equal(logits(new), logits(fresh))
    assert np.abs(logits(new) - logits(old)).max() > 1e-3
    assert new.source["gguf_sha256"] != old.source["gguf_sha256"]
    assert not old_entry.exists() and len(list((cache / "gguf").iterdir())) == 1  # the stale entry is gone


def test_a_file_rewritten_under_its_old_size_and_time_is_never_served_a_stale_entry(tmp_path, cache):
    """Regression: the key held the size and modification time alone, so a file replaced by one of the same
    header and size whose modification time was kept (``cp -p``, ``rsync -t``, ``touch -r``, a restored
    backup) was served the old weights. The status-change time, which no program can set back, is in the
    key."""
    path = write_tiny_gguf(tmp_path / "m.gguf")
    old = load_model(str(path), progress=False)
    stat = os.stat(path)
    write_tiny_gguf(path, seed=1)  # other weights; same header, same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old modification time
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    new = load_model(str(path), progress=False)
    fresh = load_model(str(path), progress=False, no_cache=True)
    np.testing.assert_array_equal(logits(new), logits(fresh))
    assert np.abs(logits(new) - logits(old)).max() > 1e-3
    assert new.source["gguf_sha256"] == fresh.source["gguf_sha256"] != old.source["gguf_sha256"]
    assert len(list((cache / "gguf").iterdir())) == 1  # the stale entry is gone


def test_an_interrupted_conversion_leaves_nothing(tmp_path, cache, monkeypatch):
    path = write_tiny_gguf(tmp_path / "m.gguf")
    real = models.cache._dequantise

    def interrupted(ref, folder):
        real(ref, folder)
        raise KeyboardInterrupt

    monkeypatch.setattr(models.cache, "_dequantise", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_model(str(path), progress=False)
    entry = models.resolve_model(str(path)).cache.path
    assert not (entry / "weights").exists() and not [p for p in entry.iterdir() if p.name.startswith(".weights")]
    monkeypatch.setattr(models.cache, "_dequantise", real)
    loaded = load_model(str(path), progress=False)
    assert loaded.location == str(entry / "weights")


def test_no_room_falls_back_to_no_cache_in_one_line(tmp_path, cache, monkeypatch, capsys):
    from countlens.llm import gguf

    path = write_tiny_gguf(tmp_path / "m.gguf")
    load_tokenizer(models.resolve_model(str(path), progress=False))  # the small part fits
    monkeypatch.setattr(gguf, "free_bytes", lambda folder: 1 << 20)
    loaded = load_model(str(path), progress=False)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("countlens:")]
    assert len(lines) == 1 and "not caching the dequantised weights of m.gguf" in lines[0], lines
    assert "free" in lines[0] and "--no-cache" in lines[0]
    entry = models.resolve_model(str(path)).cache.path
    assert not (entry / "weights").exists() and loaded.location == str(path.parent)
    np.testing.assert_array_equal(logits(loaded), logits(load_model(str(path), progress=False, no_cache=True)))


def test_capture_with_and_without_the_cache_agree(tmp_path, cache):
    path = write_tiny_gguf(tmp_path / "m.gguf")
    assert main(["llm", "capture", "--model", str(path), *SMALL, "--no-cache", "--out", str(tmp_path / "a")]) == 0
    assert not cache.exists()
    assert main(["llm", "capture", "--model", str(path), *SMALL, "--out", str(tmp_path / "b")]) == 0
    assert main(["llm", "capture", "--model", str(path), *SMALL, "--out", str(tmp_path / "c")]) == 0
    a, b, c = (load_capture(tmp_path / n) for n in "abc")
    np.testing.assert_array_equal(acts_array(a), acts_array(b))
    np.testing.assert_array_equal(acts_array(b), acts_array(c))
    assert (cache / "gguf").is_dir()


def test_a_run_loads_a_gguf_model_once(tmp_path, cache, loads):
    path = write_tiny_gguf(tmp_path / "m.gguf")
    spec = ModelSpec(model=str(path))
    with model_pool() as pool:
        assert pool.loaded(spec) is pool.loaded(spec) is spec.load(pool=pool)
        assert spec.load() is not pool.loaded(spec)  # without the pool handed on, a load of its own
    assert len(loads) == 3  # the dequantisation, the pool's load of its copy, and the load outside the pool
