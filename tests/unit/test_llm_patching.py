"""Boundary patching and steering on tiny random models: a prompt patched with its own boundary vector and a
zero steering step change nothing (bitwise); both equal hand-written forward hooks on the model's own modules;
their hooks are removed after any failure, and a location the model lacks is a ``ConfigError``."""

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.llm.capture import BoundaryCapture, find_blocks, pad_batch
from countlens.llm.models import load_model
from countlens.llm.patching import BoundaryEdit, edited_answers, random_direction, steering_vector
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_models  # noqa: F401


@pytest.fixture(scope="module")
def batch(tiny_models):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    settings = PromptSettings(L=16, counts=[1, 4, 9, 16], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    prompts = build_prompts(loaded.tokenizer, settings)
    ids, mask, index = pad_batch(prompts, 2, "left")
    return loaded.model, ids, mask, index


@pytest.fixture(scope="module")
def loaded_and_prompts(tiny_models):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    settings = PromptSettings(L=16, counts=[1, 4], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    return loaded, build_prompts(loaded.tokenizer, settings)


def logits(model, ids, mask):
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits


def by_hand(model, location, edit_row):
    """A forward hook written against the Llama modules directly: on the embedding output (location 0) or on
    ``model.model.layers[location - 1]``; ``edit_row(hidden)`` edits the hidden states in place."""
    if location == 0:
        return model.model.embed_tokens.register_forward_hook(lambda m, a, out: edit_row(out))

    def hook(module, args, output):
        edit_row(output[0] if isinstance(output, tuple) else output)
    return model.model.layers[location - 1].register_forward_hook(hook)


@pytest.mark.parametrize("location", [0, 1, 2])
def test_patching_own_vector_changes_nothing_bitwise(batch, location):
    model, ids, mask, index = batch
    with torch.inference_mode(), BoundaryCapture(model, early_stop=False) as cap:
        own = cap.run(ids, mask, index)[:, location]  # (B, d)
    clean = logits(model, ids, mask)
    with BoundaryEdit(model, location, index, replace=own):
        patched = logits(model, ids, mask)
    assert torch.equal(clean, patched)


@pytest.mark.parametrize("location", [0, 1, 2])
def test_patching_equals_hand_written_hook(batch, location):
    model, ids, mask, index = batch
    source = torch.randn(len(ids), model.config.hidden_size, generator=torch.Generator().manual_seed(1)) * 5
    rows = torch.arange(len(ids))

    def replace(hidden):
        hidden[rows, index] = source

    handle = by_hand(model, location, replace)
    try:
        want = logits(model, ids, mask)
    finally:
        handle.remove()
    with BoundaryEdit(model, location, index, replace=source):
        got = logits(model, ids, mask)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    assert (got - logits(model, ids, mask)).abs().max() > 1e-3  # the patch really changed the output


@pytest.mark.parametrize("location", [0, 2])
def test_steering_equals_hand_written_hook_and_zero_changes_nothing(batch, location):
    model, ids, mask, index = batch
    w = np.random.default_rng(0).standard_normal(model.config.hidden_size)
    step = torch.as_tensor(steering_vector(w, 3.0), dtype=torch.float32)
    assert float(w @ steering_vector(w, 3.0)) == pytest.approx(3.0)  # the probe reads exactly Δ more
    rows = torch.arange(len(ids))

    def add(hidden):
        hidden[rows, index] += step

    handle = by_hand(model, location, add)
    try:
        want = logits(model, ids, mask)
    finally:
        handle.remove()
    with BoundaryEdit(model, location, index, add=step):
        got = logits(model, ids, mask)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    with BoundaryEdit(model, location, index, add=torch.as_tensor(steering_vector(w, 0.0), dtype=torch.float32)):
        zero = logits(model, ids, mask)
    assert torch.equal(zero, logits(model, ids, mask))


def test_edit_restricted_to_rows_leaves_other_rows_alone(batch):
    model, ids, mask, index = batch
    clean = logits(model, ids, mask)
    with BoundaryEdit(model, 1, index, add=torch.full((2, model.config.hidden_size), 4.0), rows=[1, 3]):
        got = logits(model, ids, mask)
    assert torch.equal(got[[0, 2]], clean[[0, 2]])
    assert not torch.equal(got[[1, 3]], clean[[1, 3]])


def test_hooks_are_removed_after_an_error(batch):
    model, ids, mask, index = batch
    blocks = find_blocks(model)
    with pytest.raises(RuntimeError), BoundaryEdit(model, 1, index, add=torch.zeros(model.config.hidden_size)):
        raise RuntimeError("boom")
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)


def test_a_location_the_model_lacks_is_a_config_error(batch):
    model, ids, mask, index = batch
    for location in (3, -1):
        with pytest.raises(ConfigError, match="0..2 for a model with 2 blocks") as caught:
            BoundaryEdit(model, location, index, add=torch.zeros(model.config.hidden_size))
        assert caught.value.field == "locations"


def test_edits_entered_before_a_failing_one_are_removed(loaded_and_prompts, monkeypatch):
    """Regression: the batch's edits were entered into an ExitStack that nobody closed when a later edit
    failed to enter, leaving the earlier edits' hooks on the model."""
    loaded, prompts = loaded_and_prompts
    model, blocks = loaded.model, find_blocks(loaded.model)

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot hook block 1")

    monkeypatch.setattr(blocks[1], "register_forward_hook", refuse)
    d = model.config.hidden_size
    edits = [(1, "add", np.zeros(d)), (2, "add", np.zeros(d))]  # block 0's output, then block 1's
    with pytest.raises(RuntimeError, match="cannot hook block 1"), torch.inference_mode():
        edited_answers(model, loaded.tokenizer, prompts, edits, answer_tokens=1)
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)


def test_random_direction_has_the_probe_norm_and_is_seeded():
    w = np.arange(1.0, 9.0)
    u = random_direction(w, 3)
    assert np.linalg.norm(u) == pytest.approx(np.linalg.norm(w))
    assert np.array_equal(u, random_direction(w, 3)) and not np.array_equal(u, random_direction(w, 4))
