"""Model resolution without weights: the GGUF header reader (against ``gguf.GGUFReader``), the cache folder and
its keys, a missing chat template refused from the header before anything converts, hub revisions pinned to
one commit, and the pool that reads each thing once per run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from countlens.core.errors import ConfigError
from countlens.llm import models
from countlens.llm.gguf import GGUFCache, GGUFError, read_header
from countlens.llm.models import ModelPool, ModelSpec, cache_root, model_pool, resolve_model
from tests.helpers.tiny_gguf import CHATML, write_tiny_gguf


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory):
    """A tiny chat GGUF, the same without a chat template, and one with a 20k-token vocabulary."""
    root = tmp_path_factory.mktemp("gguf")
    return {"chat": write_tiny_gguf(root / "chat.gguf"), "base": write_tiny_gguf(root / "base.gguf", None),
            "large": write_tiny_gguf(root / "large.gguf", extra_tokens=20_000)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("COUNTLENS_CACHE", str(folder))
    return folder


def _reader_value(field):
    import gguf

    parts = [field.parts[i] for i in field.data]
    if field.types[0] == gguf.GGUFValueType.STRING:
        return bytes(parts[0]).decode()
    if field.types[0] == gguf.GGUFValueType.ARRAY:
        return len(field.data)
    return parts[0].tolist()[0]


@pytest.mark.parametrize("name", ["chat", "base", "large"])
def test_header_matches_gguf_reader(gguf_files, name):
    import gguf

    header = read_header(gguf_files[name])
    reader = gguf.GGUFReader(str(gguf_files[name]))
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if key in header.arrays:  # a long array: located, its length known, not read
            assert header.arrays[key].count == _reader_value(field), key
        elif isinstance(header.metadata[key], list):
            assert len(header.metadata[key]) == _reader_value(field), key
        else:
            assert header.metadata[key] == pytest.approx(_reader_value(field)), key
    assert [(t.name, t.shape) for t in header.tensors] == [(t.name, tuple(int(s) for s in reversed(t.shape)))
                                                           for t in reader.tensors]
    tokens = reader.fields["tokenizer.ggml.tokens"]
    vocab = [bytes(tokens.parts[i]).decode() for i in tokens.data]
    assert header.vocab_size == len(vocab)
    assert header.special_tokens == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                                     "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>"}
    facts = header.facts()
    assert facts["architecture"] == "llama" and facts["block_count"] == 2 and facts["context_length"] == 512
    assert facts["has_chat_template"] is (name != "base")
    assert header.chat_template == (None if name == "base" else CHATML)


def test_long_arrays_are_located_not_read(gguf_files):
    header = read_header(gguf_files["large"])
    assert {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"} <= set(header.arrays)
    assert "tokenizer.ggml.tokens" not in header.metadata
    assert header.arrays["tokenizer.ggml.tokens"].count > 20_000


def test_not_a_gguf_file_is_refused(tmp_path, gguf_files):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all, honestly")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_header(bad)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_files["chat"].read_bytes()[:4000])
    with pytest.raises(GGUFError):
        read_header(cut)
    with pytest.raises(ConfigError) as err:
        resolve_model(str(bad))
    assert err.value.field == "model" and "cannot read the GGUF file" in str(err.value)


def test_cache_folder_location(monkeypatch, tmp_path):
    monkeypatch.delenv("COUNTLENS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "countlens"
    monkeypatch.setenv("COUNTLENS_CACHE", str(tmp_path / "own"))
    assert cache_root() == tmp_path / "own"
    monkeypatch.delenv("COUNTLENS_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path(os.path.expanduser("~")) / ".cache" / "countlens"


def test_a_changed_file_gets_another_key(tmp_path, cache):
    path = write_tiny_gguf(tmp_path / "m.gguf")
    first = GGUFCache.of(path, read_header(path), cache)
    assert GGUFCache.of(path, read_header(path), cache).folder == first.folder  # the same file: the same entry
    write_tiny_gguf(path, seed=1)  # other weights, same header and size
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    assert GGUFCache.of(path, read_header(path), cache).folder != first.folder
    write_tiny_gguf(path, chat_template="{{ messages[0]['content'] }}")  # another header
    assert GGUFCache.of(path, read_header(path), cache).identity["header_sha256"] != first.identity["header_sha256"]


def test_missing_chat_template_refused_from_the_header(gguf_files, cache, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the vocabulary was converted")

    monkeypatch.setattr(models.cache, "_convert_tokenizer", refuse)
    monkeypatch.setattr(models.resolve, "file_sha256", refuse)
    with pytest.raises(ConfigError) as err:
        ModelSpec(model=str(gguf_files["base"])).resolve(template="chat")
    assert err.value.field == "template" and "no chat template" in str(err.value)
    assert not (cache / "gguf").exists()  # refused before the file was even hashed into the cache
    ModelSpec(model=str(gguf_files["base"])).resolve(template="plain")  # the plain template needs none


def test_no_cache_writes_nothing(gguf_files, cache):
    ref = ModelSpec(model=str(gguf_files["chat"]), no_cache=True).resolve()
    assert ref.cache is None and len(ref.source["gguf_sha256"]) == 64
    assert not cache.exists()
    cached = ModelSpec(model=str(gguf_files["chat"])).resolve()
    assert cached.source == ref.source and Path(cached.cache.folder).parent == cache / "gguf"


def test_hub_revision_is_pinned_to_one_commit_online(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub import constants

    commit = "c" * 40
    snapshot = tmp_path / "models--org--m" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    asked = []

    def download(repo_id, filename, revision=None, **kwargs):
        asked.append((repo_id, filename, revision))
        return str(snapshot / filename)

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    ref = resolve_model("org/m", revision="main")
    assert asked == [("org/m", "config.json", "main")]
    assert ref.location == "org/m" and ref.kwargs["revision"] == commit
    assert ref.source == {"hub_id": "org/m", "requested_revision": "main", "revision": commit}

    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    ref = resolve_model("org/m", revision="v1")  # the loaders will say what is wrong, in their own words
    assert ref.kwargs == {"revision": "v1"} and "revision" not in ref.source


def test_pool_resolves_and_reads_once(gguf_files, cache, monkeypatch):
    calls = []
    real = models.resolve._resolve
    monkeypatch.setattr(models.resolve, "_resolve", lambda *a: calls.append(a) or real(*a))
    spec = ModelSpec(model=str(gguf_files["chat"]))
    with model_pool() as pool:
        first = spec.resolve(progress=True, pool=pool)
        again = spec.resolve(progress=False, template="chat", pool=pool)
        assert len(calls) == 1 and again.key() == first.key() and again.announce is False
        assert models.load_tokenizer(first, pool) is models.load_tokenizer(again, pool)
        assert models.load_model_config(first, pool) is models.load_model_config(again, pool)
        assert pool.refs and pool.reads
        spec.resolve()
        assert len(calls) == 2  # the pool is handed on, never global: a reader without one reads afresh
    assert not pool.refs and not pool.reads  # released with the run
    spec.resolve()
    assert len(calls) == 3  # outside a pool, nothing is kept


def test_readers_keep_what_they_read_in_the_pool_handed_to_them(gguf_files, cache, monkeypatch):
    calls = []
    real = models.resolve._resolve
    monkeypatch.setattr(models.resolve, "_resolve", lambda *a: calls.append(a) or real(*a))
    spec = ModelSpec(model=str(gguf_files["chat"]))
    study = ModelPool()  # a study's pool, handed on to each model's run
    with model_pool() as other:
        first = spec.resolve(pool=study)
        assert spec.resolve(pool=study).key() == first.key() and len(calls) == 1
        assert study.refs and not other.refs  # the pool handed on, not another open one
        assert models.load_tokenizer(first, study) is models.load_tokenizer(first, study)
        assert ("tokenizer", first.key()) in study.reads and not other.reads
    study.models[("m",)] = "weights"
    study.release_models()
    assert not study.models and study.reads  # a model's turn ends: its weights go, its reads stay


def test_no_cache_is_no_part_of_a_stage_identity():
    from countlens.llm import CaptureConfig
    from countlens.pipeline.stages import Stage

    def identity(**options):
        return Stage("capture", "", CaptureConfig().with_options(**options), run=lambda c: c,
                     result_type=object).identity()

    assert identity(no_cache=True) == identity(no_cache=False)
    assert "no_cache" not in identity()["config"]["model"] and identity()["config"]["model"]["device"] == "cpu"
    assert identity(device="cuda") != identity()
