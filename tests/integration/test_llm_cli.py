"""``countlens llm capture`` / ``countlens llm prompts`` end to end on tiny models: bad input, resume, kill -9."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from countlens.core.errors import UsageError
from countlens.llm import acts_array, load_capture, read_meta
from countlens.pipeline.cli import main
from tests.helpers.cli import assert_one_line_error, run_countlens
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_models  # noqa: F401

SMALL = ["--L", "12", "--counts", "0,3,12", "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--quiet"]


def sorted_acts(path):
    ds = load_capture(path)
    order = np.lexsort((ds["config"], ds["pair"], ds["seed"], ds["n"], ds["m"]))
    return acts_array(ds)[order], [ds["prompt"][i] for i in order]


def test_capture_and_prompts_commands(tiny_models, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "cap"
    code, text, _ = run_countlens(capsys, "llm", "capture", "--model", str(tiny_models["gpt2"]), *SMALL, "--out", str(out))
    assert code == 0 and "captured 3 prompts x 3 locations x 32 dims" in text
    ds = load_capture(out)
    assert sorted(ds["n"]) == [0, 3, 12] and read_meta(out)["architecture"] == "GPT2LMHeadModel"
    assert all(n + m <= 12 for n, m in zip(ds["n"], ds["m"], strict=True))
    code, text, _ = run_countlens(capsys, "llm", "prompts", "--model", str(tiny_models["gpt2"]), "--show", "2", *SMALL[:-1])
    assert code == 0 and text.count("assistant⟦\\n⟧") == 2 and "boundary_index=" in text
    # rerunning a finished capture is a no-op that keeps the rows
    code, _, _ = run_countlens(capsys, "llm", "capture", "--model", str(tiny_models["gpt2"]), *SMALL, "--out", str(out))
    assert code == 0 and len(load_capture(out)) == 3


@pytest.mark.parametrize("argv, words", [
    (["--model", "/nonexistent/model"], ["/nonexistent/model", "not found"]),
    (["--model", "no-such-org/no-such-model-xyz"], ["cannot load model"]),
    (["--gguf-file", "/nonexistent/x.gguf"], ["GGUF file", "not found"]),
    (["--pairs", "1/0"], ["not one token", "--pairs"]),
    (["--L", "1100", "--counts", "1100"], ["context is 1024", "lower --L"]),
    (["--counts", "5:2"], ["--counts"]),
    (["--batch-size", "0"], ["--batch-size"]),
    (["--locations", "0:7"], ["--locations: location '0:7' does not exist"]),
    (["--shard-rows", "0"], ["--shard-rows must be >= 1"]),
    (["--answer-tokens", "0"], ["--answer-tokens must be >= 1"]),
    (["--per-count", "0"], ["--per-count must be >= 1"]),
    (["--configs", "poem"], ["--configs must be among"]),
    (["--counts", "0:9"], ["--counts must lie in 0..8 (at most --L)"]),
    (["--answers", "--backend", "transformer-lens"], ["--answers needs --backend hf"]),
    (["--positions", "items", "--counts", "0"], ["--positions items follows the count", "--counts are all 0"]),
    (["--device", "gpu"], ["--device must be one of"]),
    (["--revision", "v1"], ["--revision applies to hub ids"]),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tiny_models, tmp_path, capsys, argv, words):  # noqa: F811
    base = ["--model", str(tiny_models["llama"]), "--pairs", "a/b", "--configs", "count", "--seeds", "0",
            "--counts", "0:2", "--L", "8", "--quiet"]
    code, _, err = run_countlens(capsys, "llm", "capture", *base, *argv, "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, *words)
    assert not (tmp_path / "out").exists()


def test_model_without_chat_template_needs_template_plain(tiny_models, tmp_path, capsys):  # noqa: F811
    bare = tmp_path / "bare"
    shutil.copytree(tiny_models["llama"], bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    code, _, err = run_countlens(capsys, "llm", "capture", "--model", str(bare), *SMALL, "--out", str(tmp_path / "o"))
    assert_one_line_error(code, err, "--template plain")
    assert not (tmp_path / "o").exists()
    code, _, _ = run_countlens(capsys, "llm", "capture", "--model", str(bare), *SMALL, "--template", "plain",
                         "--out", str(tmp_path / "o"))
    meta = read_meta(tmp_path / "o")
    assert code == 0 and meta["settings"]["template"] == "plain" and meta["boundary"]["text"] == ":"
    assert all(p.endswith("\nAnswer:") for p in load_capture(tmp_path / "o")["prompt"])


def test_other_settings_refused_and_corrupted_shard_recomputed(tiny_models, tmp_path, capsys):  # noqa: F811
    model = str(tiny_models["llama"])
    out = tmp_path / "cap"
    argv = ["capture", "--model", model, "--L", "40", "--counts", "0:40", "--pairs", "a/b,x/o,cat/dog",
            "--configs", "count,tally", "--seeds", "0", "--batch-size", "32", "--quiet", "--out", str(out)]
    assert run_countlens(capsys, "llm", *argv)[0] == 0  # 246 prompts in one shard
    reference, prompts = sorted_acts(out)
    shards = sorted((out / "shards").iterdir())
    meta_before = (out / "meta.json").read_text()
    code, _, err = run_countlens(capsys, "llm", *[a if a != "0:40" else "0:39" for a in argv])
    assert_one_line_error(code, err, "other settings", "--out")
    assert (out / "meta.json").read_text() == meta_before
    # corrupt the arrow data of the first shard: loading reports it, a rerun recomputes it
    arrow = next(shards[0].glob("*.arrow"))
    arrow.write_bytes(b"not an arrow file" * 10)
    with pytest.raises(UsageError, match="rerun"):
        load_capture(out)
    assert run_countlens(capsys, "llm", *argv)[0] == 0
    again, prompts_again = sorted_acts(out)
    assert prompts_again == prompts
    np.testing.assert_allclose(again, reference, atol=1e-6, rtol=0)


def test_resume_after_kill_9_loses_nothing(tiny_models, tmp_path):  # noqa: F811
    """A capture killed with SIGKILL after its first shard resumes to the same rows as an uninterrupted one."""
    model = str(tiny_models["qwen2"])
    argv = ["--model", model, "--L", "30", "--counts", "0:30", "--pairs", "a/b,x/o", "--configs",
            "count,how-many", "--seeds", "0", "--shard-rows", "16", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "countlens.pipeline.cli", "llm", "capture", *argv, "--batch-size", "1", "--out", str(killed)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = killed / "shards" / "00000"
    deadline = time.monotonic() + 240
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert first.exists() and not read_meta(killed)["complete"]
    n_before = len(list((killed / "shards").glob("[0-9]*")))
    assert n_before < 8  # 124 prompts = 8 shards: the kill really interrupted the run
    with pytest.raises(UsageError, match="unfinished"):
        load_capture(killed)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    straight = tmp_path / "straight"
    assert main(["llm", "capture", *argv, "--batch-size", "16", "--out", str(straight)]) == 0
    a, pa = sorted_acts(killed)
    b, pb = sorted_acts(straight)
    assert len(pa) == 124 and pa == pb
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)  # batch 1 vs 16: float rounding only


def test_prompts_command_errors_name_its_flags(tiny_models, capsys):  # noqa: F811
    code, _, err = run_countlens(capsys, "llm", "prompts", "--model", str(tiny_models["llama"]), "--L", "4",
                                 "--counts", "0:9")
    assert_one_line_error(code, err, "--counts must lie in 0..4 (at most --L)")


def test_pairs_command_lists_single_token_pairs(tiny_models, capsys):  # noqa: F811
    code, text, _ = run_countlens(capsys, "llm", "pairs", "--model", str(tiny_models["llama"]), "--candidates",
                            "a/b,cat/elephantine,red/blue")
    lines = text.strip().splitlines()
    assert code == 0 and lines[:2] == ["a/b", "red/blue"] and "2 of 3 candidate pairs" in lines[-1]
    code, _, err = run_countlens(capsys, "llm", "pairs", "--model", str(tiny_models["llama"]), "--candidates", "a-b")
    assert_one_line_error(code, err, "--candidates takes target/distractor items")


def test_items_capture_prints_its_size_and_a_full_disk_is_refused(tiny_models, tmp_path, capsys, monkeypatch):  # noqa: F811
    """``--positions items`` says its size on disk before it starts; a capture the disk cannot hold is one
    line naming the fix, before the model loads, nothing written."""
    import shutil as shutil_module
    from collections import namedtuple

    argv = ["llm", "capture", "--model", str(tiny_models["llama"]), *SMALL, "--positions", "items"]
    code, text, _ = run_countlens(capsys, *argv, "--out", str(tmp_path / "cap"))
    ds = load_capture(tmp_path / "cap")
    rows = len(ds)
    boundary = np.flatnonzero(np.asarray(ds["item_index"]) == -1)
    assert code == 0 and len(boundary) == 3 and rows == sum(ds["n"][i] + ds["m"][i] + 1 for i in boundary)
    size, done = text.strip().splitlines()
    assert size.startswith(f"expected size on disk: {rows} rows (3 prompts) x 3 locations x 32 dims x 4 bytes = ")
    stored = acts_array(ds, dtype=np.float32)
    assert read_meta(tmp_path / "cap")["dtype"] == "float32" and stored.shape == (rows, 3, 32)
    assert f" = {stored.nbytes / 1e3:.1f} kB + " in size  # the activations as stored: rows x 3 x 32 x 4 bytes
    assert "free" in size and done.startswith(f"captured 3 prompts ({rows} rows: every item and the boundary)")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    code, _, err = run_countlens(capsys, *argv, "--out", str(tmp_path / "full"))
    assert_one_line_error(code, err, "has 1.0 kB free", "fewer --locations", "--acts-dtype float16", "--counts",
                          "another --out")
    assert not (tmp_path / "full").exists()


@pytest.fixture
def no_weights(monkeypatch):
    """Loading any model's weights fails the test: the refusals below come from the tokenizer and config."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were loaded before the bad input was refused")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def test_items_without_a_target_and_answers_beyond_the_context_are_one_line_before_the_weights_load(
        tiny_models, tmp_path, capsys, no_weights):  # noqa: F811
    """``--positions items`` on prompts with no target item, and ``--answers`` whose longest candidate does not
    fit after the longest prompt: one line naming the flags, exit 2, nothing written, no weights read."""
    model = str(tiny_models["llama"])
    base = ["--pairs", "a/b", "--configs", "count", "--seeds", "0", "--L", "10", "--quiet"]
    code, _, err = run_countlens(capsys, "llm", "capture", "--model", model, *base, "--counts", "0",
                                 "--positions", "items", "--out", str(tmp_path / "items"))
    assert_one_line_error(code, err, "--positions items", "--counts are all 0")
    assert not (tmp_path / "items").exists()
    from countlens.llm import CaptureConfig, plan_capture

    longest = plan_capture(CaptureConfig().with_options(model=model, L=10, counts=[1, 10], pairs=[["a", "b"]],
                                                        configs=["count"], seeds=[0]), progress=False).prompts[-1]
    short = tmp_path / "short-context"
    shutil.copytree(model, short)
    config = json.loads((short / "config.json").read_text())
    config["max_position_embeddings"] = longest.n_tokens + 1  # the prompts fit; "10" (two tokens) after them not
    (short / "config.json").write_text(json.dumps(config))
    code, _, err = run_countlens(capsys, "llm", "capture", "--model", str(short), *base, "--counts", "1,10",
                                 "--answers", "--out", str(tmp_path / "answers"))
    assert_one_line_error(code, err, "longest candidate answer (2 tokens", "context of", "lower --L",
                          "the largest of --counts")
    assert not (tmp_path / "answers").exists()
