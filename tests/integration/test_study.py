"""``countlens study`` on two tiny models: each model's own report, the comparison, and resuming."""

import csv
import json
import re
import shutil

import pytest

from countlens.pipeline.cli import main
from countlens.pipeline.study import CACHE_DIR, MODELS_DIR
from tests.helpers.captures import PNG
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_models  # noqa: F401


def _study(out, models, *extra) -> int:
    return main(["study", "--models", ",".join(str(m) for m in models), "--preset", "test", "--out", str(out),
                 *extra])


def test_study_writes_every_report_and_the_comparison_then_resumes(tiny_models, tmp_path, capsys):  # noqa: F811
    pytest.importorskip("ray")
    models = [tiny_models["llama"], tiny_models["gpt2"]]
    out = tmp_path / "study"
    assert _study(out, models, "--ray", "local:2") == 0
    assert "2 of 2 models compared" in capsys.readouterr().out
    for name in ("llama", "gpt2"):
        report = out / MODELS_DIR / name
        assert (report / "index.html").is_file() and (report / "geometry" / "figure5.png").is_file()
        assert (report / "probe" / "probes.json").is_file() and (report / "compare" / "compare.json").is_file()
    data = json.loads((out / "study.json").read_text())
    assert [m["name"] for m in data["models"]] == ["llama", "gpt2"]
    for m in data["models"]:
        assert m["n_blocks"] == 2 and m["relative_depth"] == [0.0, 0.5, 1.0]
        assert len(m["gap_ratio"]) == len(m["erank_ratio"]) == 3
        assert m["best_probe"]["location"] in ("embeddings", "after block 1", "after block 2")
        assert m["nearest_toy_variant"] in ("linear", "softmax", "softmax-postln-bare", "softmax-postln-learned")
        assert 0.0 <= m["behaviour_accuracy"] <= 1.0  # the presets capture the model's own answers
    with open(out / "study.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["model"] for r in rows] == [str(m) for m in models]
    assert rows[0]["gap_ratio_last"] and rows[0]["best_probe_location"]
    page = (out / "index.html").read_text()
    assert 'href="models/llama/index.html"' in page and 'href="models/gpt2/index.html"' in page
    spans = re.findall(r'<span class="v" data-json="study.json" data-key="([^"]+)">([^<]+)</span>', page)
    assert len(spans) == 2 * 9
    for key, text in spans:  # every number on the page is the one in study.json
        value = data
        for part in key.split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
        assert text == (f"{value:.3g}" if isinstance(value, float) else str(value)), key
    assert (out / "study.png").read_bytes().startswith(PNG) and (out / "study.pdf").is_file()

    # Half finished: the second model was interrupted before its comparison; the first is done.
    first_report = out / MODELS_DIR / "llama" / "reproduce.json"
    first_mtime = first_report.stat().st_mtime_ns
    shutil.rmtree(out / MODELS_DIR / "gpt2" / "compare")
    for cached in (out / CACHE_DIR).iterdir():
        if json.loads(cached.read_text())["config"]["name"] == "gpt2":
            cached.unlink()
    assert _study(out, models) == 0
    log = capsys.readouterr().err
    assert f"study: {models[0]} reused" in log and f"study: {models[1]} done" in log
    assert first_report.stat().st_mtime_ns == first_mtime  # the finished model was not run again
    assert (out / MODELS_DIR / "gpt2" / "compare" / "compare.json").is_file()
    again = json.loads((out / "study.json").read_text())
    assert [m["name"] for m in again["models"]] == ["llama", "gpt2"]


def test_a_model_that_cannot_be_captured_is_one_line_before_any_work(tiny_models, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "study"
    code = _study(out, [tiny_models["llama"], tmp_path / "no-such-model"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "no-such-model" in lines[0], lines
    assert not (out / MODELS_DIR).exists()


def test_study_tasks_side_by_side_per_model(tiny_models, tmp_path, capsys):  # noqa: F811
    # --tasks: one report per model and task (the lenses added), then each model's tasks compared on one page
    from countlens.pipeline.tasks import TASKS_DIR

    out = tmp_path / "study"
    assert _study(out, [tiny_models["llama"]], "--tasks", "lists,repeat:separator=pipe") == 0
    assert "2 of 2 runs (models × tasks) compared" in capsys.readouterr().out
    data = json.loads((out / "study.json").read_text())
    assert [(m["name"], m["task"]) for m in data["models"]] == [("llama--lists", "lists"),
                                                                  ("llama--repeat-separator-pipe", "repeat:separator=pipe")]
    assert data["tasks"] == [f"{TASKS_DIR}/llama/index.html"]
    tasks = json.loads((out / TASKS_DIR / "llama" / "tasks.json").read_text())
    assert [t["task"] for t in tasks["tasks"]] == ["lists", "repeat:separator=pipe"]
    for t in tasks["tasks"]:
        report = (out / TASKS_DIR / "llama" / t["report"]).resolve()
        assert report.is_file() and (report.parent / "lens" / "lens.json").is_file() and t["lens"]
        probes = json.loads((report.parent / "probe" / "probes.json").read_text())
        assert t["best_probe"]["location"] and len(t["probe"]) == len(probes["locations"])
    repeat = json.loads((out / MODELS_DIR / "llama--repeat-separator-pipe" / "capture" / "acts" / "meta.json").read_text())
    assert repeat["settings"]["task"] == "repeat:separator=pipe"
    assert f'href="{TASKS_DIR}/llama/index.html"' in (out / "index.html").read_text()


def test_study_task_is_each_models_task_and_part_of_its_resume_key(tmp_path, monkeypatch, capsys):
    # --task (issue 30): the study's own task goes into every model's reproduce (its capture and every stage that
    # inherits the task), first among --tasks; another task, or an edited task file, is another resume key.
    from countlens.core.cache import ResultCache
    from countlens.pipeline import study
    from countlens.pipeline.reproduce import build_stages

    planned = []
    monkeypatch.setattr(study, "run_study", lambda config, out, ray=None, progress=True: (planned.append(config) or
                                                                           (study.StudyResult({}, []), {})))
    model = "default"  # nothing is loaded: run_study is replaced, the configs are only built
    assert _study(tmp_path / "s", [model], "--task", "repeat:separator=comma", "--where") == 0
    assert _study(tmp_path / "s", [model], "--task", "repeat:separator=pipe", "--tasks", "lists,repeat:separator=pipe") == 0
    assert _study(tmp_path / "s", [model]) == 0
    assert _study(tmp_path / "s", [model], "--task", "lists") == 0
    [job] = planned[0].jobs()
    assert job["task"] == job["capture"]["task"] == "repeat:separator=comma" and job["name"] == "default"
    stages = {s.name: s for s in build_stages(job["preset"], job["capture"])}
    assert stages["capture"].config.prompts.task == "repeat:separator=comma"
    assert stages["patching"].config.prompts.task == "repeat:separator=comma" and stages["patching"].refused is None
    assert "corrupted twin" in stages["heads"].refused  # inherited, and refused there: a repeat task has no twins
    assert [(j["name"], j["task"]) for j in planned[1].jobs()] == [("default--repeat-separator-pipe", "repeat:separator=pipe"),
                                                                    ("default--lists", "lists")]
    assert planned[2].jobs() == planned[3].jobs() and "task" not in planned[2].jobs()[0]  # the default: keys as before
    cache = ResultCache(tmp_path / "cache", "model")
    assert cache.path(planned[0].jobs()[0]) != cache.path(planned[2].jobs()[0])

    records = tmp_path / "records.jsonl"
    records.write_text('{"text": "How many cats: cat dog cat?", "count": 2}\n')
    first = study.StudyConfig(models=(model,), preset="test", capture={"task": f"file:{records}"}).jobs()
    records.write_text('{"text": "How many dogs: cat dog cat?", "count": 2}\n')
    edited = study.StudyConfig(models=(model,), preset="test", capture={"task": f"file:{records}"}).jobs()
    assert first[0]["capture"] == edited[0]["capture"] and cache.path(first[0]) != cache.path(edited[0])

    # A bad task is one line naming the option, exit 2, before any model is read (the model does not exist)
    monkeypatch.undo()
    capsys.readouterr()
    records.write_text('{"text": "How many cats: cat dog cat?", "count": 99}\n')  # beyond the preset's counts
    for option, value in (("--task", "nope"), ("--tasks", f"lists,file:{tmp_path / 'no.jsonl'}"),
                          ("--task", f"file:{records}"), ("--tasks", f"lists,file:{records}")):
        code = _study(tmp_path / "bad", [tmp_path / "no-such-model"], option, value)
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert code == 2 and len(err) == 1 and err[0].startswith(f"countlens: error: {option}"), err
    assert not (tmp_path / "bad").exists()
