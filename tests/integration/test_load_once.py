"""Load once per run: ``reproduce`` loads a model once for all its LLM stages (capture, patching, steering, the
items capture, patching over positions, heads, lenses — the stages that declare ``model`` are handed it as
``loaded=``), with the same results as loading it per stage;
``study`` releases each model's weights before the next one loads."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import weakref

import numpy as np
import pytest

from countlens.llm import acts_array, load_capture
from countlens.pipeline import reproduce as reproduce_module
from countlens.pipeline.reproduce import build_stages, reproduce
from tests.helpers.llm_fixtures import tiny_models  # noqa: F401
from tests.helpers.tiny_gguf import write_tiny_gguf

# The stages handed the run's model (the registry's ``uses_model``), and the stages they read from.
LOADING = tuple(s.name for s in build_stages("test") if s.model is not None)
LLM_STAGES = tuple(dict.fromkeys([*LOADING, *(n for s in build_stages("test") if s.model is not None
                                               for n in s.needs)]))


@pytest.fixture
def loads(monkeypatch):
    import transformers

    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, location, *args, **kwargs):
        model = real(cls, location, *args, **kwargs)
        seen.append(("gguf_file" in kwargs, weakref.ref(model)))
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    return seen


def rows(out, stage, name):
    data = json.loads((out / stage / name).read_text())
    return data["rows"]


def test_reproduce_loads_each_model_once_with_the_same_results(tmp_path, monkeypatch, loads):
    monkeypatch.setenv("COUNTLENS_CACHE", str(tmp_path / "cache"))
    model = str(write_tiny_gguf(tmp_path / "m.gguf"))
    handed = []
    stages = build_stages("test", {"model": model})
    # every stage whose run can take a loaded model is handed the capture's (none loads its own)
    takes = tuple(s.name for s in stages if "loaded" in inspect.signature(s.run).parameters)
    assert takes == tuple(s.name for s in stages if s.model is not None) == LOADING and "capture" in LOADING
    real_build = reproduce_module.build_stages

    def recording(*args, **kwargs):  # each loading stage's run, wrapped to record what it is handed
        def spy(run):
            @functools.wraps(run)
            def recorded(*a, **k):
                handed.append((a[0], k.get("loaded")))
                return run(*a, **k)
            return recorded
        return [dataclasses.replace(s, run=spy(s.run)) if s.name in LOADING else s
                for s in real_build(*args, **kwargs)]

    monkeypatch.setattr(reproduce_module, "build_stages", recording)
    once = tmp_path / "once"
    summary = reproduce(once, "test", {"model": model}, only=list(LLM_STAGES))
    assert all(s["status"] == "done" for s in summary["stages"] if s["stage"] in LLM_STAGES), summary["stages"]
    assert [gguf for gguf, _ in loads] == [True, False]  # dequantised once, its float copy loaded once
    assert len(handed) == len(LOADING) and len({id(m) for _, m in handed}) == 1 and handed[0][1]
    handed.clear()
    loads.clear()

    per_stage = tmp_path / "per-stage"
    monkeypatch.setattr(reproduce_module, "model_pool", contextlib.nullcontext)  # every stage loads its own
    reproduce(per_stage, "test", {"model": model}, only=list(LLM_STAGES))
    assert len(loads) >= len(LOADING) and all(m is None for _, m in handed)
    np.testing.assert_array_equal(acts_array(load_capture(once / "capture" / "acts")),
                                  acts_array(load_capture(per_stage / "capture" / "acts")))
    assert rows(once, "patching", "patching.json") == rows(per_stage, "patching", "patching.json")
    assert rows(once, "steering", "steering.json") == rows(per_stage, "steering", "steering.json")
    np.testing.assert_array_equal(acts_array(load_capture(once / "capture-items" / "acts")),
                                  acts_array(load_capture(per_stage / "capture-items" / "acts")))
    for stage, name in (("patching-positions", "position_patching.json"), ("heads", "heads.json"),
                        ("lens", "lens.json")):
        same = json.loads((once / stage / name).read_text().replace(str(once), str(per_stage)))  # paths aside
        other = json.loads((per_stage / stage / name).read_text())
        for d in (same, other):  # how long each took is no part of the result
            for key in ("provenance", "wall_s", "seconds"):
                d.pop(key, None)
        assert same == other, stage


def test_study_releases_a_model_before_the_next_loads(tiny_models, tmp_path, monkeypatch, loads):  # noqa: F811
    from countlens.pipeline import study

    alive_at_load = []
    real = study.run_study_model

    def run_model(job, out, device=None, pool=None, progress=True):
        alive_at_load.append([ref() is not None for _, ref in loads])
        return real(job, out, device, pool=pool, progress=progress)

    def summary(job, folder, out):
        return study.ModelSummary(job["model"], job["name"], 2, [], [], [], {}, {}, None, None, "")

    monkeypatch.setattr(study, "run_study_model", run_model)
    monkeypatch.setattr(study, "study_stages", lambda *groups: ["capture"])  # what the models load for
    monkeypatch.setattr(study, "summarize_model", summary)
    monkeypatch.setattr(study.StudyResult, "save", lambda self, out: [])
    monkeypatch.setattr(study, "draw_study", lambda result, out: [])
    monkeypatch.setattr(study, "write_study_page", lambda result, out: None)
    models = (str(tiny_models["llama"]), str(tiny_models["qwen2"]))
    result, failures = study.run_study(study.StudyConfig(models=models, preset="test"), tmp_path / "s",
                                       log=lambda line: None)
    assert not failures and len(result.models) == 2
    assert len(loads) == 2 and alive_at_load == [[], [False]]  # the first model was gone when the second loaded
