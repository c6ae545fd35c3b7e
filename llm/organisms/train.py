"""Training an organism: a stock Llama causal LM taught to answer the counting prompts, its answer tokens
supervised, with a planted circuit.

Pure numerics of tensors and token ids: no file is read or written here (the experiment does that).

**Architecture.** ``transformers``' ``LlamaForCausalLM`` (RMSNorm before attention, before the MLP and before
the unembedding: pre-norm; rotary positions; tied embedding and unembedding), so any Hugging Face loader reads
it with no custom code. *Attention-only* is the same class with ``intermediate_size = 1`` and the MLP's three
weights set to zero and frozen (never given to the optimiser), so every block's MLP adds exactly 0 to the
residual.

**Planted circuit.** A head that is not live has its slice of its block's attention output projection
(``o_proj.weight[:, h*hd:(h+1)*hd]``) zero at initialisation, its gradient zeroed by a hook before every
optimiser step and the slice written back to zero after it: the head still exists (its queries, keys and
values are computed), but it writes nothing into the residual, so only the live heads move information
between positions. Zeroing is exact: ablating a dead head, by any method, changes no output.

**Loss.** Cross-entropy on the answer tokens only: after the prompt (its boundary last), the count as the
tokenizer writes it (:func:`countlens.llm.answers.answer_token_ids`) and then the end-of-turn token. The
logits are taken at those positions alone (the unembedding over a 49k vocabulary is the costly part), and by
default the softmax runs over the *task's vocabulary* only (``vocab``: every token of the prompts and answers,
a few hundred): the other tokens' embedding rows are never read, keep their small random initialisation, and
take no part in training. That costs the step's unembedding and softmax (0.27 s -> 0.13 s a step measured on the
quick organism, one thread) and changes nothing that is checked: every accuracy (the held-out curve, the
result, ``organism check``) is of the greedy answer over the *full* vocabulary, so an organism whose untrained
rows outscored its answers would fail them.

**Teacher-forced accuracy.** A prompt is answered right by greedy decoding exactly when, fed the correct
answer, the argmax at every answer position is the next correct token (the last one being end-of-turn): so
the training loop's held-out accuracy costs one forward per prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MLP_MODULES = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Shape:
    """The organism's architecture: ``layers`` blocks of ``heads`` heads, residual width ``width``
    (``head_dim = width / heads``), MLPs of ``mlp_width`` (0: attention-only), vocabulary ``vocab``."""

    layers: int
    heads: int
    width: int
    mlp_width: int
    vocab: int
    context: int
    bos: int
    eos: int
    pad: int
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


def llama_config(shape: Shape):
    """The ``transformers`` ``LlamaConfig`` of ``shape`` (attention-only: ``intermediate_size`` 1)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.width, intermediate_size=max(1, shape.mlp_width),
                       num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                       num_key_value_heads=shape.heads, head_dim=shape.head_dim,
                       max_position_embeddings=shape.context, tie_word_embeddings=True,
                       rope_theta=shape.rope_theta, bos_token_id=shape.bos, eos_token_id=shape.eos,
                       pad_token_id=shape.pad, attention_bias=False, mlp_bias=False)


def dead_heads(layers: int, heads: int, live: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]]:
    """Every (block, head) not in ``live`` (``None``: every head is live, none dead)."""
    if live is None:
        return []
    keep = set(live)
    return [(b, h) for b in range(layers) for h in range(heads) if (b, h) not in keep]


def head_columns(head: int, head_dim: int) -> slice:
    """The columns of ``o_proj.weight`` (d, heads*head_dim) that read head ``head``'s output."""
    return slice(head * head_dim, (head + 1) * head_dim)


def build_model(shape: Shape, live: Sequence[tuple[int, int]] | None, seed: int):
    """A freshly initialised ``LlamaForCausalLM`` (``torch.manual_seed(seed)``), the dead heads' output
    columns zero and, for an attention-only shape, the MLP weights zero."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(shape))
    model.generation_config.eos_token_id = shape.eos
    model.generation_config.pad_token_id = shape.pad
    model.generation_config.bos_token_id = shape.bos
    plant(model, shape, live)
    return model


def plant(model, shape: Shape, live: Sequence[tuple[int, int]] | None) -> None:
    """Write the planted zeros: the dead heads' ``o_proj`` columns and, attention-only, every MLP weight."""
    import torch

    with torch.no_grad():
        for b, h in dead_heads(shape.layers, shape.heads, live):
            model.model.layers[b].self_attn.o_proj.weight[:, head_columns(h, shape.head_dim)] = 0.0
        if shape.mlp_width == 0:
            for layer in model.model.layers:
                for name in MLP_MODULES:
                    getattr(layer.mlp, name).weight.zero_()


def trained_parameters(model, shape: Shape) -> list:
    """The parameters the optimiser moves: all but an attention-only model's MLP weights."""
    frozen = {id(getattr(layer.mlp, n).weight) for layer in model.model.layers for n in MLP_MODULES} \
        if shape.mlp_width == 0 else set()
    return [p for p in model.parameters() if id(p) not in frozen]


def dead_masks(model, shape: Shape, live: Sequence[tuple[int, int]] | None) -> dict[int, object]:
    """Per block with a dead head: a (d, heads*head_dim) 0/1 mask of ``o_proj.weight``, 0 on dead columns."""
    import torch

    masks: dict[int, object] = {}
    for b, h in dead_heads(shape.layers, shape.heads, live):
        weight = model.model.layers[b].self_attn.o_proj.weight
        mask = masks.setdefault(b, torch.ones_like(weight))
        mask[:, head_columns(h, shape.head_dim)] = 0.0
    return masks


def apply_masks(model, masks: dict[int, object], grad: bool) -> None:
    """Zero the dead columns of ``o_proj`` (``grad``: of its gradient) in every masked block."""
    import torch

    with torch.no_grad():
        for b, mask in masks.items():
            weight = model.model.layers[b].self_attn.o_proj.weight
            if grad:
                if weight.grad is not None:
                    weight.grad.mul_(mask)
            else:
                weight.mul_(mask)


def sequences(prompt_ids: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], eos: int, pad: int):
    """Right-padded training rows: prompt, answer, end-of-turn, fed without their last token.

    Returns ``input_ids`` (B, T), ``attention_mask`` (B, T), and the answer positions ``rows``, ``cols``,
    ``targets`` (N,) — the token each position must predict (each answer token, then ``eos``)."""
    import torch

    full = [list(p) + list(a) + [eos] for p, a in zip(prompt_ids, answers, strict=True)]
    T = max(len(f) for f in full) - 1
    ids = torch.full((len(full), T), pad, dtype=torch.long)
    mask = torch.zeros((len(full), T), dtype=torch.long)
    rows, cols, targets = [], [], []
    for i, (p, f) in enumerate(zip(prompt_ids, full, strict=True)):
        ids[i, : len(f) - 1] = torch.tensor(f[:-1])
        mask[i, : len(f) - 1] = 1
        for j in range(len(p) - 1, len(f) - 1):  # the boundary predicts the first answer token
            rows.append(i)
            cols.append(j)
            targets.append(f[j + 1])
    return ids, mask, torch.tensor(rows), torch.tensor(cols), torch.tensor(targets)


def answer_logits(model, ids, mask, rows, cols, vocab=None):
    """Logits (N, V) at the answer positions ``(rows, cols)`` of a right-padded batch; with ``vocab`` (sorted
    token ids, (K,)) only those tokens' logits, (N, K)."""
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, d), after the final norm
    if vocab is None:
        return model.lm_head(hidden[rows, cols])  # (N, V)
    return hidden[rows, cols] @ model.lm_head.weight[vocab].T  # (N, K); Llama's lm_head has no bias


def task_vocabulary(sequences_ids: Sequence[Sequence[int]], extra: Sequence[int] = ()):
    """The sorted token ids (K,) occurring in ``sequences_ids`` (the prompts and answers) or ``extra``."""
    import torch

    seen = set(int(t) for t in extra)
    for ids in sequences_ids:
        seen.update(int(t) for t in ids)
    return torch.tensor(sorted(seen), dtype=torch.long)


def answer_loss(model, batch, vocab=None):
    """Mean cross-entropy (nats per answer token) of a :func:`sequences` batch, the softmax over ``vocab``
    (sorted token ids holding every target; ``None``: the full vocabulary)."""
    import torch
    import torch.nn.functional as F

    ids, mask, rows, cols, targets = batch
    if vocab is not None:
        where = torch.searchsorted(vocab, targets)
        if bool((where >= len(vocab)).any()) or bool((vocab[where.clamp(max=len(vocab) - 1)] != targets).any()):
            raise ValueError("a target token is outside the softmax's vocabulary")
        targets = where
    return F.cross_entropy(answer_logits(model, ids, mask, rows, cols, vocab).float(), targets)


def teacher_forced_correct(model, batch) -> np.ndarray:
    """(B,) bool: every answer position's argmax is the correct next token (greedy decoding answers right)."""
    import torch

    ids, mask, rows, cols, targets = batch
    with torch.inference_mode():
        hit = (answer_logits(model, ids, mask, rows, cols).argmax(-1) == targets).numpy()
    ok = np.ones(ids.shape[0], dtype=bool)
    np.logical_and.at(ok, rows.numpy(), hit)
    return ok


AVERAGE = 0.99  # the moving average's decay per step (a horizon of ~100 steps)


def update_average(average, model, step: int) -> None:
    """Move ``average``'s parameters towards ``model``'s: ``a <- a + (1 - decay) (w - a)``, the decay
    ``min(AVERAGE, (1 + step) / (10 + step))`` (early steps follow the weights closely). A parameter entry
    that is zero in every step (a dead head's columns, an attention-only MLP) stays exactly zero."""
    import torch

    decay = min(AVERAGE, (1 + step) / (10 + step))
    with torch.no_grad():
        torch._foreach_lerp_(list(average.parameters()), list(model.parameters()), 1.0 - decay)


def largest_parameter_vector(model) -> tuple[str, int | None, float]:
    """The parameter vector of the largest Euclidean norm, over every weight matrix's rows (an embedding's
    token vectors, a projection's output rows) and every norm scale: ``(name, row, norm)`` — the parameter's
    name as ``model.named_parameters()`` gives it (a tied unembedding once, under its embedding's name), the
    row of a matrix (``None`` for a 1-D parameter: a norm's gain) and the norm, the organism's ``B``. The
    first parameter in ``named_parameters`` order wins a tie."""
    import torch

    best: tuple[str, int | None, float] = ("", None, 0.0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            norms = p.norm(dim=-1).reshape(-1) if p.dim() > 1 else p.norm().reshape(1)
            row = int(norms.argmax())
            if float(norms[row]) > best[2]:
                best = (name, row if p.dim() > 1 else None, float(norms[row]))
    return best


def largest_parameter_norm(model) -> float:
    """The largest Euclidean norm of one parameter vector (:func:`largest_parameter_vector`): the
    organism's ``B``."""
    return largest_parameter_vector(model)[2]


__all__ = ["MLP_MODULES", "Shape", "llama_config", "dead_heads", "head_columns", "build_model", "plant",
           "trained_parameters", "dead_masks", "apply_masks", "sequences", "answer_logits", "task_vocabulary", "answer_loss",
           "teacher_forced_correct", "AVERAGE", "update_average", "largest_parameter_vector",
           "largest_parameter_norm"]
