"""``countlens llm patch``, ``llm steer`` and ``llm capture --answers`` end to end on a tiny model: the files
they write, and bad input (one line, exit 2, nothing written)."""

import json
import shutil

import pytest

from countlens.core.store import load_capture, read_meta
from countlens.pipeline.cli import main
from tests.helpers.cli import assert_one_line_error, run_countlens
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models, write_probes  # noqa: F401

SMALL = ["--L", "12", "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--quiet"]


@pytest.fixture(scope="module")
def capture_with_answers(tiny_model_dir, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("cli") / "acts"
    assert main(["llm", "capture", "--model", str(tiny_model_dir), "--counts", "0:12", *SMALL, "--answers",
                 "--answer-tokens", "3", "--out", str(out)]) == 0
    return out


def probes_for(capture, path, **source):
    """A probes.json for ``capture`` (best location: the last), as `countlens probe` writes one."""
    return write_probes(path, read_meta(capture), best=-1, seed=3, **source)


def test_capture_answers_columns(capture_with_answers):
    ds = load_capture(capture_with_answers)
    assert {"answer_text", "answer", "answer_logprob"} <= set(ds.column_names)
    assert len(ds["answer_text"]) == 13 and all(lp < 0 for lp in ds["answer_logprob"])


def test_patch_writes_result_csv_and_figure(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    code, out, err = run_countlens(capsys, "llm", "patch", "--model", str(tiny_model_dir), *SMALL, "--sources", "9,2",
                             "--targets", "2,9", "--answer-tokens", "3", "--out", str(tmp_path))
    assert code == 0, err
    assert {p.name for p in tmp_path.iterdir()} == {"patching.json", "patching.csv", "fig9a_patching.png",
                                                     "fig9a_patching.pdf"}
    data = json.loads((tmp_path / "patching.json").read_text())
    assert [loc["name"] for loc in data["locations"]] == read_meta_names(3)
    assert "patched" in out


def read_meta_names(n):
    return ["embed"] + [f"blocks.{i}.hook_resid_post" for i in range(n - 1)]


def test_steer_writes_result_and_figure(capsys, capture_with_answers, tmp_path):
    probes_for(capture_with_answers, tmp_path / "probes.json")
    out = tmp_path / "out"
    code, _, err = run_countlens(capsys, "llm", "steer", "--acts", str(capture_with_answers), "--probes",
                           str(tmp_path / "probes.json"), "--deltas=-2,0,2", "--counts", "3,6",
                           "--answer-tokens", "2", "--quiet", "--out", str(out))
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {"steering.json", "steering.csv", "fig9b_steering.png",
                                                "fig9b_steering.pdf"}


@pytest.mark.parametrize(("deltas", "word"), [("", "--deltas"), ("nan", "--deltas"), ("1,inf", "--deltas"),
                                              ("a,b", "--deltas")])
def test_steer_refuses_bad_delta_grids(capsys, capture_with_answers, tmp_path, deltas, word):
    probes_for(capture_with_answers, tmp_path / "probes.json")
    code, _, err = run_countlens(capsys, "llm", "steer", "--acts", str(capture_with_answers), "--probes",
                           str(tmp_path / "probes.json"), "--deltas", deltas, "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, word)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("source", [{"model": "someone/else"}, {"rows": 999}])
def test_steer_refuses_a_probe_file_from_another_capture(capsys, capture_with_answers, tmp_path, source):
    probes_for(capture_with_answers, tmp_path / "probes.json", **source)
    code, _, err = run_countlens(capsys, "llm", "steer", "--acts", str(capture_with_answers), "--probes",
                           str(tmp_path / "probes.json"), "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "--probes holds probes fitted on another capture", "on --acts")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "words"), [
    (["--location", "blocks.9.hook_resid_post"], ["--location", "does not exist"]),
    (["--counts", "90,95"], ["none of --counts"]), (["--max-prompts", "0"], ["--max-prompts must be >= 1"]),
    (["--answer-tokens", "0"], ["--answer-tokens must be >= 1"]), (["--device", "gpu"], ["--device must be one of"])])
def test_steer_errors_name_the_flag(capsys, capture_with_answers, tmp_path, argv, words):
    probes_for(capture_with_answers, tmp_path / "probes.json")
    code, _, err = run_countlens(capsys, "llm", "steer", "--acts", str(capture_with_answers), "--probes",
                                 str(tmp_path / "probes.json"), *argv, "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, *words)
    assert not (tmp_path / "out").exists()


def test_steer_in_count_units_along_mean_diff_needs_no_probes(capsys, capture_with_answers, tmp_path):
    out = tmp_path / "out"
    code, text, err = run_countlens(capsys, "llm", "steer", "--acts", str(capture_with_answers), "--direction",
                                    "mean-diff", "--units", "count", "--location", "1", "--deltas=-1,0,1",
                                    "--counts", "3,6", "--answer-tokens", "2", "--quiet", "--out", str(out))
    assert code == 0, err
    assert "along mean-diff (and a random control)" in text and "count units" in text
    data = json.loads((out / "steering.json").read_text())
    assert set(data["curves"]) == {"mean-diff", "random"} and data["probe_norm"] is None
    assert [c["step_norm"] for c in data["curves"]["random"]] == pytest.approx(
        [c["step_norm"] for c in data["curves"]["mean-diff"]])


@pytest.mark.parametrize(("argv", "words"), [
    (["--direction", "mean-diff"], ["--units readout (the default)", "--units count"]),
    (["--direction", "up"], ["--direction must list distinct directions"]),
    (["--units", "count", "--direction", "mean-diff", "--probes", ""], ["name the location", "--location"])])
def test_steer_units_and_directions_errors_name_the_flag(capsys, capture_with_answers, tmp_path, argv, words):
    probes_for(capture_with_answers, tmp_path / "probes.json")
    code, _, err = run_countlens(capsys, "llm", "steer", "--acts", str(capture_with_answers), "--probes",
                                 str(tmp_path / "probes.json"), *argv, "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, *words)
    assert not (tmp_path / "out").exists()


def test_steer_in_count_units_without_a_capture_is_one_line(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    code, _, err = run_countlens(capsys, "llm", "steer", "--acts", str(tmp_path / "empty"), "--direction",
                                 "mean-diff", "--units", "count", "--location", "1", "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "--acts", "not a countlens activation folder")
    assert not (tmp_path / "out").exists()


def test_patch_refuses_unpaired_counts(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    code, _, err = run_countlens(capsys, "llm", "patch", "--model", str(tiny_model_dir), *SMALL, "--sources", "1,2",
                           "--targets", "3", "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "--sources", "--targets")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argv", "words"), [
    (["--sources", "200", "--targets", "3"], ["--sources must lie in 0..12 (at most --L)"]),
    (["--sources", "3", "--targets", "30"], ["--targets must lie in 0..12"]),
    (["--locations", "0:9"], ["--locations", "does not exist"]), (["--batch-size", "0"], ["--batch-size must be"]),
    (["--answer-tokens", "0"], ["--answer-tokens must be"]), (["--pairs", "a/a"], ["--pairs: a pair is two"]),
    (["--configs", "poem"], ["--configs must be among"]), (["--device", "gpu"], ["--device must be one of"])])
def test_patch_errors_name_the_flag(capsys, tiny_model_dir, tmp_path, argv, words):  # noqa: F811
    """Regression: ``llm patch --sources 200 --targets 3`` said "--counts must lie in 0..64", a flag patch lacks."""
    code, _, err = run_countlens(capsys, "llm", "patch", "--model", str(tiny_model_dir), *SMALL, *argv,
                                 "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, *words)
    assert "--counts" not in err and not (tmp_path / "out").exists()


def test_answers_refused_on_a_model_without_a_generation_prompt(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "chat_template.jinja").write_text("{% for message in messages %}{{ message['content'] }}{% endfor %}")
    code, _, err = run_countlens(capsys, "llm", "capture", "--model", str(model), "--counts", "1,2", *SMALL, "--answers",
                           "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "generation prompt", "--template plain")
    assert not (tmp_path / "out").exists()


def test_patch_positions_writes_result_csv_and_figure(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    code, out, err = run_countlens(capsys, "llm", "patch", "--model", str(tiny_model_dir), *SMALL, "--positions", "all",
                                   "--counts", "2,5", "--flip", "first", "--out", str(tmp_path))
    assert code == 0, err
    assert {p.name for p in tmp_path.iterdir()} == {"position_patching.json", "position_patching.csv",
                                                     "fig11_position_patching.png", "fig11_position_patching.pdf"}
    data = json.loads((tmp_path / "position_patching.json").read_text())
    assert data["flip"] == "first" and [p["n_clean"] for p in data["pairs"]] == [2, 5]
    assert [loc["name"] for loc in data["locations"]] == read_meta_names(3)
    assert "patched 2 prompt pairs" in out and "too close to normalise" in out


def test_patch_boundary_reports_the_teacher_forced_scores(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    code, out, _ = run_countlens(capsys, "llm", "patch", "--model", str(tiny_model_dir), *SMALL, "--sources", "9,2",
                                 "--targets", "2,9", "--answer-tokens", "2", "--min-gap", "1e-6",
                                 "--out", str(tmp_path))
    assert code == 0
    data = json.loads((tmp_path / "patching.json").read_text())
    assert {"normalised_ld", "expected_shift", "logp_source_change"} <= set(data["locations"][0])
    assert data["candidates"] == list(range(2, 10)) and "normalised" in out


@pytest.fixture
def no_weights(monkeypatch):
    """Loading any weights fails the test: the errors below must come from the tokenizer and config alone."""
    from countlens.llm.models import ModelSpec

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were loaded before the bad input was refused")

    monkeypatch.setattr(ModelSpec, "load", refuse)


@pytest.mark.parametrize(("argv", "words"), [
    (["--positions", "all", "--counts", "0,3"], ["--counts must be >= 1", "no target to turn"]),
    (["--positions", "items", "--counts", "3,20"], ["--counts must lie in 0..12 (at most --L)"]),
    (["--positions", "all", "--sources", "3"], ["--sources is for --positions boundary", "--counts"]),
    (["--flip", "first"], ["--flip is for --positions all", "--sources and --targets"]),
    (["--counts", "3"], ["--counts is for --positions all"]),
    (["--positions", "all", "--location-step", "0"], ["--location-step must be >= 1"]),
    (["--positions", "all", "--min-gap", "0"], ["--min-gap must be a positive finite number (nats)"]),
    (["--min-gap", "-1"], ["--min-gap must be a positive finite number (nats)"]),
    (["--positions", "all", "--locations", "0:9"], ["--locations", "does not exist"]),
    (["--positions", "all", "--batch-size", "0"], ["--batch-size must be >= 1"]),
    (["--positions", "all", "--pairs", "a/a"], ["--pairs: a pair is two"])])
def test_patch_positions_refuses_bad_input_before_the_model_loads(capsys, tiny_model_dir, tmp_path,  # noqa: F811
                                                                   no_weights, argv, words):
    code, _, err = run_countlens(capsys, "llm", "patch", "--model", str(tiny_model_dir), *SMALL, *argv,
                                 "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, *words)
    assert not (tmp_path / "out").exists()


def test_patch_positions_refuses_pairs_that_leave_no_corrupted_twin(capsys, tiny_model_dir, tmp_path,  # noqa: F811
                                                                     no_weights, monkeypatch):
    """A pair whose twin (one target turned into the distractor) tokenizes differently anywhere but the flipped
    item has no corrupted twin to patch: one line naming --pairs, exit 2, nothing written, no weights read.
    The tokenizer here merges the twin's last two tokens (no real vocabulary at hand does, for a pair that
    passes the prompts' own one-token checks)."""
    import countlens.llm.positions.experiment as positions

    real = positions.load_tokenizer

    def merging(ref, pool=None):
        tok = real(ref, pool)

        class Merging:  # the prompts are encoded as a batch of texts; a twin alone, and one token shorter
            def __getattr__(self, name):  # (the answers' own short texts, checked first, encode as they are)
                return getattr(tok, name)

            def __call__(self, text, **kwargs):
                out = tok(text, **kwargs)
                twin = isinstance(text, str) and len(out["input_ids"]) > 8
                return {"input_ids": out["input_ids"][:-1]} if twin else out

        return Merging()

    monkeypatch.setattr(positions, "load_tokenizer", merging)
    code, _, err = run_countlens(capsys, "llm", "patch", "--model", str(tiny_model_dir), *SMALL, "--positions", "all",
                                 "--counts", "3", "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "turning a target of pair a/b into its distractor changes the prompt's "
                          "other tokens", "choose other --pairs")
    assert not (tmp_path / "out").exists()
