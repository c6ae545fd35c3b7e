"""``countlens llm lens`` end to end on a tiny model: the files it writes, and bad input (a model without an
output embedding, candidates beyond the vocabulary, a capture without the last location, bad options) — one
line, exit 2, nothing written."""

import json
import shutil

import pytest

from countlens.core.store import read_meta
from countlens.pipeline.cli import main
from tests.helpers.cli import assert_one_line_error, run_countlens
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models, write_probes  # noqa: F401

SMALL = ["--L", "12", "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--per-count", "3", "--quiet"]


@pytest.fixture(scope="module")
def capture(tiny_model_dir, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("lens-cli") / "acts"
    assert main(["llm", "capture", "--model", str(tiny_model_dir), "--counts", "0:12", *SMALL, "--out", str(out)]) == 0
    return out


def test_lens_writes_result_csvs_and_figure(capsys, capture, tmp_path):
    write_probes(tmp_path / "probes.json", read_meta(capture))
    out = tmp_path / "out"
    code, text, err = run_countlens(capsys, "llm", "lens", "--acts", str(capture), "--probes",
                                    str(tmp_path / "probes.json"), "--baseline-directions", "20", "--quiet",
                                    "--out", str(out))
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {"lens.json", "lens.csv", "angles.csv", "fig13_lens.png",
                                                "fig13_lens.pdf"}
    data = json.loads((out / "lens.json").read_text())
    assert [loc["name"] for loc in data["locations"]] == read_meta(capture)["locations"]
    assert "tuned lens reads the correct first token best" in text
    header = (out / "lens.csv").read_text().splitlines()[0]
    assert header == "location,location_index,lens,row,n,logprob,rank,expected"


def _with_model(capture, tmp_path, model_dir, **config):
    """A copy of the capture recorded as made by a copy of ``model_dir`` whose config.json has ``config``."""
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    data = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**data, **config}))
    acts = tmp_path / "acts"
    shutil.copytree(capture, acts)
    meta = json.loads((acts / "meta.json").read_text())
    meta["settings"]["model"] = str(model)
    (acts / "meta.json").write_text(json.dumps(meta))
    return acts


@pytest.mark.parametrize(("config", "words"), [
    ({"architectures": ["LlamaModel"], "tie_word_embeddings": False}, ["--acts", "without an output embedding"]),
    ({"vocab_size": 30}, ["--acts", "beyond the model's 30 output rows"])])
def test_lens_refuses_a_model_it_cannot_read(capsys, capture, tiny_model_dir, tmp_path, config, words):  # noqa: F811
    acts = _with_model(capture, tmp_path, tiny_model_dir, **config)
    code, _, err = run_countlens(capsys, "llm", "lens", "--acts", str(acts), "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "words"), [
    (["--locations", "9"], ["--locations", "does not exist"]), (["--alphas", "-1"], ["--alphas must be"]),
    (["--split", "0.5,0.5"], ["--split must be three fractions"]), (["--counts", "5:2"], ["--counts"]),
    (["--counts", "0:10"], ["--counts leaves out 2 of the capture's counts (11,12)", "every prompt's correct count"]),
    (["--baseline-directions", "0"], ["--baseline-directions must be >= 1"]), (["--threads", "0"], ["--threads"]),
    (["--device", "gpu"], ["--device must be one of"]), (["--probes", "nowhere.json"], ["--probes"])])
def test_lens_errors_name_the_flag(capsys, capture, tmp_path, argv, words):
    code, _, err = run_countlens(capsys, "llm", "lens", "--acts", str(capture), *argv, "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, *words)
    assert not (tmp_path / "out").exists()


def test_lens_refuses_a_capture_without_the_last_location(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    acts = tmp_path / "acts"
    assert main(["llm", "capture", "--model", str(tiny_model_dir), "--counts", "0:6", *SMALL, "--locations", "0:1",
                 "--out", str(acts)]) == 0
    code, _, err = run_countlens(capsys, "llm", "lens", "--acts", str(acts), "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "--acts lacks the last block's output", "include -1")
    assert not (tmp_path / "out").exists()
