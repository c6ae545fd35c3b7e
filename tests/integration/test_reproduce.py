"""`countlens reproduce` end to end on a tiny random chat model (the "test" size preset), the report's
numbers against the JSON beside it, resuming, failing stages, and rendering in headless Chromium."""

import dataclasses
import json
import re
import shutil
import subprocess

import pytest

from countlens.core.errors import UsageError
from countlens.core.results import Result
from countlens.pipeline.cli import main
from countlens.pipeline.experiments import experiments, preset_config
from countlens.pipeline.reproduce import build_stages
from countlens.pipeline.stages import Stage, run_stage
from tests.helpers.report_checks import check_report

PNG = b"\x89PNG\r\n\x1a\n"
# Every declared experiment that draws a figure (the registry: a new one is checked without an edit here).
FIGURES = tuple(e.name for e in experiments() if e.figure is not None)


@pytest.fixture
def tiny_model(tiny_chat_model):
    return tiny_chat_model


@pytest.fixture
def report(test_preset_report):
    return test_preset_report


@pytest.mark.slow
def test_reproduce_writes_a_complete_report(report):
    out, code = report
    summary = json.loads((out / "reproduce.json").read_text())
    not_done = {s["stage"]: s.get("reason") for s in summary["stages"] if s["status"] != "done"}
    assert not_done == {} and code == 0
    # Every number (and every other value) shown comes from the JSON file its span names; outside the
    # spans the only numbers are those of the fixed figure and table headings.
    parser = check_report(out, (out / "index.html").read_text())
    assert len(parser.values) > 50
    # Every figure of every figure stage is shown, exists, and is a PNG.
    for stage in FIGURES:
        assert any(src.startswith(f"{stage}/") for src in parser.images), f"no figure of stage {stage}"
    for src in parser.images:
        assert (out / src).read_bytes()[:8] == PNG, src
    assert len(parser.images) >= 9
    # The geometry behind Figures 5 and 6 is in the JSON and CSV beside them.
    geo = json.loads((out / "geometry" / "geometry.json").read_text())
    assert geo["high_window"] == [8, 11] and len(geo["per_location"]) == 3
    assert (out / "geometry" / "figure5.csv").is_file() and (out / "compare" / "compare.csv").is_file()


@pytest.mark.slow
def test_a_relative_out_is_the_same_report(report, tiny_model, monkeypatch):
    # A stage's identity is its config: the report made with an absolute --out is reused, stage for stage,
    # through a relative one (and progress bars or --out-derived paths are not part of it).
    out, _ = report
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/stage.json")}
    monkeypatch.chdir(out.parent)
    assert main(["reproduce", "--preset", "test", "--model", str(tiny_model), "--out", out.name]) == 0
    summary = json.loads((out / "reproduce.json").read_text())
    assert [s["stage"] for s in summary["stages"] if not s["reused"]] == []
    assert before == {p: p.stat().st_mtime_ns for p in out.glob("*/stage.json")}
    settings = json.loads((out / "geometry" / "stage.json").read_text())["settings"]
    assert settings["config"]["acts"] == "capture/acts" and str(out) not in json.dumps(settings)


@pytest.mark.slow
def test_reproduce_resumes_without_recomputing(report, tiny_model):
    out, _ = report
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/stage.json")}
    assert main(["reproduce", "--preset", "test", "--model", str(tiny_model), "--out", str(out)]) == 0
    summary = json.loads((out / "reproduce.json").read_text())
    assert all(s["reused"] for s in summary["stages"])
    assert before == {p: p.stat().st_mtime_ns for p in out.glob("*/stage.json")}
    # Other settings into the same folder are refused, not mixed.
    assert main(["reproduce", "--quick", "--model", str(tiny_model), "--out", str(out)]) == 2
    assert before == {p: p.stat().st_mtime_ns for p in out.glob("*/stage.json")}


@pytest.mark.slow
def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium); render check skipped")
    out, _ = report

    def body(folder):
        dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                              "--dump-dom", (folder / "index.html").as_uri()], capture_output=True, text=True,
                             timeout=120).stdout
        return dict(re.findall(r'data-(broken-images|images)="(\d+)"', re.search(r"<body[^>]*>", dom).group(0)))

    seen = body(out)
    assert int(seen["images"]) >= 9 and seen["broken-images"] == "0"
    # The check can fail: a copy of the report with one figure removed shows one broken image.
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("acts", "toy-acts"))
    (copy / "geometry" / "figure5.png").unlink()
    assert body(copy)["broken-images"] == "1"


def test_failing_stage_is_named_and_others_kept(tmp_path, capsys, tiny_model):
    # A model whose tokenizer and config are fine (so the checks before the first stage pass) but whose
    # weights are broken: the capture stage itself fails.
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    out = tmp_path / "r"
    code = main(["reproduce", "--preset", "test", "--model", str(broken), "--out", str(out),
                 "--stages", "capture,geometry"])
    assert code == 1
    summary = json.loads((out / "reproduce.json").read_text())
    status = {s["stage"]: s["status"] for s in summary["stages"]}
    assert status["capture"] == "failed" and status["geometry"] == "skipped"
    assert status["toy-rates"] == "not run"
    assert "stage capture failed" in capsys.readouterr().err
    assert (out / "index.html").is_file() and not (out / "capture" / "stage.json").exists()


def test_an_unknown_model_is_refused_before_any_stage(tmp_path, capsys):
    out = tmp_path / "r"
    code = main(["reproduce", "--preset", "test", "--model", str(tmp_path / "no-such-model"), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("countlens: error:"), err
    assert not out.exists()


@dataclasses.dataclass(frozen=True)
class _Config:
    x: int = 1


@dataclasses.dataclass
class _Result(Result):
    x: int = 0


def _stage(run):
    return Stage("s", "a stage", _Config(), run, _Result)


def test_a_stage_that_returns_no_result_fails_clearly(tmp_path):
    record = run_stage(tmp_path, _stage(lambda config: None))
    assert record["status"] == "failed" and record["reason"] == "the stage returned None, not a _Result"


def test_stage_plan_covers_every_figure_and_table(tmp_path):
    stages = {s.name: s for s in build_stages("quick", {"model": "default"})}
    # organism-scaling declares no quick stage (6 minutes of training); the test preset has every figure
    assert (set(FIGURES) - {"organism-scaling"}) | {"toy-rates", "toy-lcap", "toy-table2", "toy-table3",
                                                   "capture"} <= set(stages)
    assert "organism-scaling" not in stages and set(FIGURES) <= {s.name for s in build_stages("test")}
    assert set(stages["compare"].needs) == {"capture", "toy-construct"}
    assert stages["compare"].config.toy == ("toy-construct",) and stages["compare"].config.acts == "capture/acts"
    assert stages["steering"].config.probes == "probe/probes.json"  # one declaration: reads={"probes": "probe"}
    assert main(["reproduce", "--out", str(tmp_path / "x"), "--stages", "nope"]) == 2


def test_crashing_stage_is_logged_and_ctrl_c_stops_the_run(tmp_path):
    def boom(config):
        raise RuntimeError("boom")

    record = run_stage(tmp_path, _stage(boom))
    assert record["status"] == "failed" and record["reason"].startswith("RuntimeError: boom")
    assert "Traceback" in (tmp_path / "s" / "error.log").read_text()

    def refused(config):
        raise UsageError("L must be >= 1")

    assert run_stage(tmp_path, _stage(refused))["reason"] == "L must be >= 1"

    def interrupted(config):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_stage(tmp_path, _stage(interrupted))


@pytest.mark.slow
def test_quick_preset_on_a_tiny_model_writes_a_complete_report(tmp_path, tiny_model):
    """`countlens reproduce --quick` itself (the `make demo` sizes and the capture's prompt set), on a tiny
    random model so the capture is cheap: every stage finishes and every figure is a PNG whose numbers come
    from the JSON beside it. The three stages that train the toy to the quick lengths (Tables 2 and 3, and
    Figure 2, which reads Table 3) take about eight minutes on 2 cores, and the quick organism (and its checks,
    which read it) trains for about three, so the suite checks that their quick configs validate and
    `make demo` runs them (its time is in BENCHMARKS.md); tests/integration/test_organism_cli.py trains a
    smaller organism and checks it."""
    trained = {"toy-table2", "toy-table3", "toy-figure2", "organism", "organism-checks"}
    for name in trained:  # the toy configs validate on construction: rebuilding one re-runs the checks
        dataclasses.replace(preset_config(name, "quick"))
    out = tmp_path / "quick"
    names = [s.name for s in build_stages("quick")]
    assert trained <= set(names)
    only = ",".join(n for n in names if n not in trained)
    assert main(["reproduce", "--quick", "--model", str(tiny_model), "--stages", only, "--out", str(out)]) == 0
    summary = json.loads((out / "reproduce.json").read_text())
    assert summary["preset"] == "quick"
    assert {s["stage"]: s["status"] for s in summary["stages"]} == {
        n: "not run" if n in trained else "done" for n in names}
    parser = check_report(out, (out / "index.html").read_text())
    for stage in (set(FIGURES) & set(names)) - trained:  # organism-scaling has no quick stage (6 minutes)
        assert any(src.startswith(f"{stage}/") for src in parser.images), f"no figure of stage {stage}"
    for src in parser.images:
        assert (out / src).read_bytes()[:8] == PNG, src
    geo = json.loads((out / "geometry" / "geometry.json").read_text())
    assert geo["low_window"] == [1, 10] and geo["high_window"] == [91, 100]


@pytest.mark.slow
def test_tasks_side_by_side_against_their_captures(report):
    # reproduce --tasks: each repeat task is a report of its own; the comparison's numbers equal what is
    # recomputed here from each task's capture (the answers), probe and lens files.
    import csv
    from collections import defaultdict

    import numpy as np

    from countlens.core.capture import open_capture
    from countlens.pipeline.tasks import TASKS_DIR

    out, code = report
    assert code == 0
    # (reproduce.json's own list of the tasks run is rewritten by the tests that rerun this report without
    # --tasks; each task's own report says what it ran)
    for folder in ("repeat-separator-comma", "repeat-separator-space"):
        sub = json.loads((out / TASKS_DIR / folder / "reproduce.json").read_text())
        assert {s["stage"] for s in sub["stages"] if s["status"] == "done"} == {"capture", "geometry", "probe", "lens",
                                                                               "manifold"}
    tasks = json.loads((out / TASKS_DIR / "tasks.json").read_text())
    assert [t["task"] for t in tasks["tasks"]] == ["lists", "repeat:separator=comma", "repeat:separator=space"]
    for t in tasks["tasks"]:
        folder = (out / TASKS_DIR / t["report"]).parent
        capture = open_capture(folder / "capture" / "acts")
        n = capture.column("n").astype(int)
        answer = capture.column("answer")
        if t["task"].startswith("repeat"):
            sep = ", " if "comma" in t["task"] else " "
            texts = capture.column("prompt")
            # one prompt per count, the word written n times with the separator (independently of the task code)
            assert sorted(n.tolist()) == sorted(set(n.tolist()))
            for k, text in zip(n, texts, strict=True):
                assert (sep.join(["a"] * k) in text) and (k == 0 or sep.join(["a"] * (k + 1)) not in text)
        for row in t["per_count"]:
            mine = n == row["n"]
            right = np.where(np.isnan(answer[mine].astype(float)), False, answer[mine].astype(float) == row["n"])
            assert row["accuracy"] == pytest.approx(right.mean())
        probes = json.loads((folder / "probe" / "probes.json").read_text())
        for row, loc in zip(t["probe"], probes["locations"], strict=True):
            assert row["r2"] == pytest.approx(np.mean([f["r2"] for f in loc["fits"]]))
        ranks = defaultdict(list)
        with open(folder / "lens" / "lens.csv") as f:
            for r in csv.DictReader(f):
                if int(r["rank"]) > 0:
                    ranks[(int(r["location_index"]), r["lens"])].append(int(r["rank"]))
        assert len(t["lens"]) == len({k[0] for k in ranks})
        for row, index in zip(t["lens"], sorted({k[0] for k in ranks}), strict=True):
            assert row["logit"] == pytest.approx(np.mean(ranks[(index, "logit")]))
            assert row["tuned"] == pytest.approx(np.mean(ranks[(index, "tuned")]))
    page = (out / "index.html").read_text()
    assert "Tasks side by side" in page and f'src="{TASKS_DIR}/tasks.png"' in page
    assert (out / TASKS_DIR / "tasks.png").read_bytes()[:8] == PNG
    check_report(out / TASKS_DIR, (out / TASKS_DIR / "index.html").read_text())


def test_an_analysis_the_task_cannot_run_is_not_run_and_says_why():
    stages = {s.name: s for s in build_stages("test", {"task": "repeat:separator=comma"})}
    assert "corrupted twin" in stages["patching-positions"].refused and "corrupted twin" in stages["heads"].refused
    assert stages["capture"].refused is None and stages["capture"].config.prompts.task == "repeat:separator=comma"
    assert stages["capture-items"].config.prompts.task == "repeat:separator=comma"
    from countlens.pipeline.stages import run_stages

    records = run_stages("/nonexistent", [stages["heads"]])
    assert records["heads"]["status"] == "not run" and "corrupted twin" in records["heads"]["reason"]


def test_the_tasks_grammar():
    from countlens.core.errors import ConfigError
    from countlens.pipeline.tasks import parse_tasks, task_folder_name

    assert parse_tasks("lists, repeat:separator=comma,word=b ,letters") == (
        "lists", "repeat:separator=comma,word=b", "letters")
    assert task_folder_name("repeat:separator=comma,word=b") == "repeat-separator-comma-word-b"
    for bad, says in (("lists,lists", "more than once"), ("count", "must be one of"),
                      ("repeat:separator=tab", "separator"), ("", "at least one")):
        with pytest.raises(ConfigError, match=says):
            parse_tasks(bad)


def test_quick_extra_tasks_trade_their_sizes():
    # make demo's extra tasks: every other count and no geometry (its windows need every count); the command
    # line's counts win, and the other presets keep every stage and the preset's counts.
    from countlens.pipeline.reproduce import capture_config
    from countlens.pipeline.tasks import task_capture, task_stages

    assert task_stages("quick") == [s for s in task_stages("full") if s != "geometry"]
    assert "geometry" in task_stages("full") and "geometry" in task_stages("test")
    config = capture_config("quick", task_capture("quick", {"batch_size": 4}, "repeat:separator=comma"))
    assert config.prompts.counts == list(range(0, 101, 2)) and config.prompts.task == "repeat:separator=comma"
    assert config.batch_size == 4
    assert task_capture("quick", {"counts": [1, 2]}, "repeat")["counts"] == [1, 2]
    assert "counts" not in task_capture("full", None, "repeat")
