"""Float64 models give finite, exact left-padded batches under eager attention (:func:`~countlens.llm.hooks.
guard_float64_masks`, applied by the organism checks' float64 copy): Gemma-2 (eager is its only attention) and
Llama-3 inside the heads' ``eager_attention`` — each padded batch's last-position logits equal the same prompts
run one by one, unpadded. Without the guard the same batch is NaN (so the check can fail)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from countlens.llm.capture.residuals import find_blocks  # noqa: E402
from countlens.llm.heads.attention import eager_attention  # noqa: E402
from countlens.llm.hooks import guard_float64_masks  # noqa: E402
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer  # noqa: E402,F401


def _batch(vocab: int):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, vocab, (2, 24), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :7] = 0  # row 0 is left-padded by 7 tokens (longer than gemma's window of 16 with the rest)
    ids[0, :7] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _last_logits(model, ids, mask, positions):
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]


def _alone(model, ids, mask, positions):
    rows = []
    for r in range(ids.shape[0]):
        keep = mask[r].bool()
        rows.append(_last_logits(model, ids[r:r + 1, keep], mask[r:r + 1, keep], positions[r:r + 1, keep])[0])
    return torch.stack(rows)


@pytest.mark.parametrize("family,eager", [("gemma-2", False), ("llama-3", True)])
def test_float64_padded_batches_are_finite_and_exact(family, eager, family_model):  # noqa: F811
    from transformers import AutoModelForCausalLM

    path = family_model(family)
    guarded = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64).eval()
    guard_float64_masks(guarded)
    guard_float64_masks(guarded)  # once per model: a second call adds no hook
    assert sum(len(b._forward_pre_hooks) for b in find_blocks(guarded)) == guarded.config.num_hidden_layers
    plain = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64).eval()
    ids, mask, positions = _batch(guarded.config.vocab_size)
    for model, finite in ((guarded, True), (plain, False)):
        with eager_attention(model) if eager else _nothing():
            assert model.config._attn_implementation == "eager"
            got = _last_logits(model, ids, mask, positions)
            if not finite:
                assert torch.isnan(got[0]).all()  # what the guard prevents
                continue
            assert torch.isfinite(got).all()
            assert torch.equal(got, _alone(model, ids, mask, positions))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
