"""Session-scoped pytest fixtures for the LLM tests: the SmolLM2 tokenizer (extracted once) and tiny models.

Import the fixtures into a test module (``from tests.helpers.llm_fixtures import tiny_model_dir, ...  # noqa: F401``)
or a conftest. Each tiny model is built once per session and must be treated as read-only.
"""

from __future__ import annotations

import pytest

from tests.helpers.model_families import BY_NAME, build_family_model
from tests.helpers.tiny_models import ARCHS, build_tiny_chat_model, smollm2_tokenizer_dir


@pytest.fixture(scope="session")
def smollm2_tokenizer(tmp_path_factory):
    """A folder with SmolLM2's tokenizer files and chat template."""
    return smollm2_tokenizer_dir(tmp_path_factory.mktemp("smollm2-tokenizer"))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, smollm2_tokenizer):
    """``{arch: folder}`` of tiny random chat models (llama, qwen2, gpt2), seed 0."""
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: build_tiny_chat_model(root / arch, arch, seed=0, tokenizer_dir=smollm2_tokenizer)
            for arch in ARCHS}


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_models):
    """The tiny Llama chat model's folder."""
    return tiny_models["llama"]


@pytest.fixture(scope="session")
def family_model(tmp_path_factory, smollm2_tokenizer):
    """``family_model(name)``: the folder of the tiny random model of a conformance-matrix family
    (see :mod:`tests.helpers.model_families`), built on first use."""
    root = tmp_path_factory.mktemp("families")
    built = {}

    def get(name: str):
        if name not in built:
            built[name] = build_family_model(root / name, BY_NAME[name], seed=0, smollm2_dir=smollm2_tokenizer)
        return built[name]
    return get


def write_probes(path, meta: dict, best: int = 1, seed: int = 7, **source):
    """Write a ``probes.json`` (:class:`~countlens.probes.probe.ProbeResult`) for the capture whose
    ``meta.json`` is ``meta``: one random probe direction at every location, the validation-selected best at
    location ``best``; ``source`` overrides what the file says it was fitted on (model, rows, d). Returns
    ``path``."""
    import numpy as np

    from countlens.probes.probe import LocationProbes, ProbeFit, ProbeResult

    w = np.random.default_rng(seed).standard_normal(meta["d"]).tolist()

    def fit(acc: float) -> ProbeFit:
        return ProbeFit(seed=0, alpha=1.0, alpha_rel=1.0, val_rounded_acc=acc, test_rounded_acc=acc, r2=0.5,
                        mae=1.0, coef_norm=float(np.linalg.norm(w)), intercept=0.0, binned=[], n_train=1, n_val=1,
                        n_test=1, val_rounded_acc_path=[acc], coef_norm_path=[1.0], coef=w)

    result = ProbeResult(config={}, source={"model": meta["model"], "rows": meta["n_prompts"], "d": meta["d"],
                                            **source}, alphas=[1.0],
                         locations=[LocationProbes(name, i, [fit(0.9 if i % len(meta["locations"]) == best %
                                                                 len(meta["locations"]) else 0.1)])
                                    for i, name in enumerate(meta["locations"])])
    result.write(path)
    return path
