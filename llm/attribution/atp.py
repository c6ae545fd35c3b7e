"""Attribution patching (AtP; Nanda 2023, Kramár et al. 2024): every patch of one prompt pair estimated from one
forward and one backward.

A patch replaces an activation ``a`` of the **base** run (the run patched) by the **source** run's value
``a'`` at one cell (a residual location and a position; a block's attention or MLP write at one position or at
all of them; one head's slice of the attention output projection's input). The metric is the logit difference
of activation patching, ``LD = log p("n") − log p("n − 1")`` with every answer token teacher-forced
(:func:`countlens.llm.answers.score_candidates`). AtP replaces the patched run by the first-order Taylor
expansion of the metric at the base run:

    ΔLD(cell) ≈ Σ_{cell's coordinates} (a' − a) · ∂LD/∂a  (at the base run),

every cell's estimate from the same gradient. One batched forward holds three rows — the base prompt followed by
each of the two candidate answers, and the source prompt (whose activations only are read) — and one backward
gives ∂LD/∂a at every site at once. A prompt position's activation is shared by the two candidate rows (the model
is causal), so its gradient is the sum of both rows'.

What it can show: cheaply, which cells may matter. What it cannot: it is linear at the base run — a patch that
saturates a softmax (an attention pattern, the answer's own probability) or that later components undo is
misestimated, which is why every estimate is checked here against the patch itself (:func:`agreement`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from countlens.llm.answers import continuation_mask
from countlens.llm.capture.residuals import find_blocks
from countlens.llm.hooks import HookSet, HookSite, hook_sites

METRIC_ROWS = 2  # the metric's two candidate answers: column 0 ("n") minus column 1 ("n − 1")


@dataclass
class GradientPass:
    """One prompt pair's activations and gradients at every hook site asked for, prompt positions only.

    ``base`` / ``source``: ``{kind: (n_sites, T, w) float64}`` the two runs' activations; ``grad``: the same shapes,
    ``∂LD/∂a`` at the base run; ``ld``: the base run's logit difference (nats) from the same forward."""

    base: dict[str, np.ndarray]
    source: dict[str, np.ndarray]
    grad: dict[str, np.ndarray]
    ld: float


@contextlib.contextmanager
def frozen_parameters(model):
    """The model's parameters with ``requires_grad`` off (no weight gradient is built), restored on exit."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def candidate_logprob(logits, start: int, tokens: Sequence[int], ends):
    """log P(tokens as the final answer | the first ``start + 1`` positions) (docs/definitions.md §2): every token
    teacher-forced, then no token that continues the number. ``logits`` (T', V) of one row whose positions
    ``start ..`` predict ``tokens`` in turn and the token after them; ``ends`` (V,) bool, the tokens that continue
    a number (:func:`countlens.llm.answers.continuation_mask`) -> a scalar tensor (float64)."""
    import torch

    rows = logits[start:start + len(tokens) + 1].double().log_softmax(-1)  # (m + 1, V)
    said = rows[torch.arange(len(tokens)), torch.as_tensor(list(tokens), device=logits.device)].sum()
    return said + torch.logsumexp(rows[len(tokens)].masked_fill(ends, float("-inf")), dim=-1)


def gradient_pass(model, base_ids: Sequence[int], source_ids: Sequence[int], candidates: Sequence[Sequence[int]],
                  sites: dict[str, Sequence[HookSite]]) -> GradientPass:
    """:class:`GradientPass` of the base prompt ``base_ids`` (T,) and the source prompt ``source_ids`` (T,) at the
    hook sites ``sites`` (``{kind: sites}``, each kind's sites one activation (T, w) each; residual location 0,
    the input of block 0, is where the gradient starts and may be among them). ``candidates``: the two answers'
    token lists; LD = log P(candidates[0]) − log P(candidates[1]), final answers. One forward of three right-padded rows and one
    backward; no weight gradient."""
    import torch

    if len(candidates) != METRIC_ROWS:
        raise ValueError(f"the metric compares two candidate answers, got {len(candidates)}")
    T = len(base_ids)
    if len(source_ids) != T:
        raise ValueError("the base and source prompts must have the same number of tokens")
    blocks = find_blocks(model)
    device = model.get_input_embeddings().weight.device
    rows = [list(base_ids) + list(c) for c in candidates] + [list(source_ids)]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [r[-1]] * (width - len(r)) for r in rows], device=device)  # (3, T'): padded at the end
    seen: dict[tuple[str, int], object] = {}
    [start] = hook_sites([0], len(blocks))

    def leaf(hidden):  # the gradient flows from block 0's input: every later activation is a function of it
        hidden = hidden.detach().requires_grad_(True)
        seen[("start", 0)] = hidden
        return hidden

    def keep(key):
        def fn(hidden):
            seen[key] = hidden
        return fn

    hooks = [(start, leaf)] + [(site, keep((kind, i))) for kind, group in sites.items() for i, site in enumerate(group)]
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.enable_grad())
        stack.enter_context(frozen_parameters(model))
        stack.enter_context(HookSet(blocks).attach(hooks))
        kept = width - (T - 1)  # the logits from the boundary on: the unembedding of the others is never read
        kwargs = {"logits_to_keep": kept} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False, **kwargs).logits
        logits = logits[:, -kept:]  # (3, kept, V): position T − 1 + i at index i
        ends = continuation_mask(model, logits.shape[-1], logits.device)
        lp = [candidate_logprob(logits[k], 0, c, ends) for k, c in enumerate(candidates)]
        ld = lp[0] - lp[1]
        keys = [(kind, i) for kind, group in sites.items() for i in range(len(group))]
        missing = [k for k in keys if k not in seen]
        if missing:
            raise RuntimeError(f"a hook did not fire: {missing[0]}")
        grads = torch.autograd.grad(ld, [seen[k] for k in keys], allow_unused=True)
    out: dict[str, dict[str, list]] = {"base": {}, "source": {}, "grad": {}}
    for (kind, _), act, g in zip(keys, (seen[k] for k in keys), grads, strict=True):
        a = act.detach().double()[:, :T].cpu().numpy()  # (3, T, w)
        gr = np.zeros_like(a[0]) if g is None else g.detach().double()[:METRIC_ROWS, :T].sum(0).cpu().numpy()
        out["base"].setdefault(kind, []).append(a[0])
        out["source"].setdefault(kind, []).append(a[METRIC_ROWS])
        out["grad"].setdefault(kind, []).append(gr)
    stacked = {part: {kind: np.stack(v) for kind, v in d.items()} for part, d in out.items()}
    return GradientPass(stacked["base"], stacked["source"], stacked["grad"], float(ld.detach()))


# ------------------------------------------------------------------------------------------ the estimates


def atp_effects(base: np.ndarray, source: np.ndarray, grad: np.ndarray, width: int | None = None) -> np.ndarray:
    """AtP's estimated metric change of patching each cell: ``Σ (source − base) · grad`` over each cell's
    coordinates. ``base``, ``source``, ``grad`` (..., T, w); without ``width`` a cell is one position's whole
    vector -> (..., T); with ``width`` (a head's) the last axis splits into ``w / width`` units -> (..., T, units).
    Nats."""
    delta = (np.asarray(source, np.float64) - np.asarray(base, np.float64)) * np.asarray(grad, np.float64)
    if width is None:
        return delta.sum(axis=-1)
    return delta.reshape(*delta.shape[:-1], delta.shape[-1] // int(width), int(width)).sum(axis=-1)


def top_k_overlap(a: np.ndarray, b: np.ndarray, k: int) -> float | None:
    """The fraction of the ``k`` cells of largest |a| that are among the ``k`` of largest |b| (ties broken by
    order); ``None`` for no cells."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = min(int(k), a.size)
    if k < 1:
        return None
    top_a = set(np.argsort(-np.abs(a), kind="stable")[:k].tolist())
    top_b = set(np.argsort(-np.abs(b), kind="stable")[:k].tolist())
    return len(top_a & top_b) / k


def agreement(atp: np.ndarray, act: np.ndarray, top_k: int) -> dict[str, float | int | None]:
    """How well AtP's estimates ``atp`` (N,) rank and size the patches ``act`` (N,) (nats): Spearman's ρ
    (``None`` for fewer than three cells or a constant side), the top-``k`` overlap (:func:`top_k_overlap`), the
    largest and the mean absolute error and the number of cells."""
    from scipy.stats import spearmanr

    atp, act = np.asarray(atp, np.float64), np.asarray(act, np.float64)
    rho = None
    if atp.size >= 3 and np.ptp(atp) > 0 and np.ptp(act) > 0:
        rho = float(spearmanr(atp, act).statistic)
    err = np.abs(atp - act)
    return {"cells": int(atp.size), "spearman": rho, "top_k": min(int(top_k), int(atp.size)),
            "top_k_overlap": top_k_overlap(atp, act, top_k), "max_abs_error": float(err.max()) if err.size else None,
            "mean_abs_error": float(err.mean()) if err.size else None}


__all__ = ["METRIC_ROWS", "GradientPass", "frozen_parameters", "candidate_logprob", "gradient_pass", "atp_effects",
           "top_k_overlap", "agreement"]
