"""The final-answer probability of a candidate count computed directly (docs/definitions.md §2): the prompt and
the candidate's tokens fed whole in one unpadded forward, no cache, no feeds, no packing:
``log P(k) = Σ log p(token | prompt, earlier tokens) + log(1 − Σ_{t continues a number} p(t | prompt, k))``."""

from __future__ import annotations

import numpy as np
import torch


def final_logprob(model, prompt_ids: list[int], candidate: list[int], continuation) -> float:
    """log P(candidate as the final answer | prompt), float64 from one plain forward; ``continuation``: the ids
    of the tokens that continue a number."""
    ids = torch.tensor([list(prompt_ids) + list(candidate)])
    logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)  # (T + k, V)
    start = len(prompt_ids) - 1
    tokens = sum(float(logp[start + i, t]) for i, t in enumerate(candidate))
    last = logp[-1].exp()
    cont = np.asarray(continuation, dtype=np.int64)
    cont = cont[cont < last.shape[0]]
    return tokens + float(np.log1p(-float(last[torch.as_tensor(cont)].sum())))


def final_from_logp(logp, start: int, candidate: list[int], model) -> float:
    """log P(candidate as the final answer) from ``logp`` (T, V): the log-softmax of one forward of the prompt
    followed by the whole candidate, ``start`` the boundary's position; the continuing tokens are those of the
    tokenizer ``model`` was loaded with."""
    from countlens.llm.answers import number_continuations
    from countlens.llm.models import tokenizer_of

    ends = torch.as_tensor(number_continuations(tokenizer_of(model)))
    ends = ends[ends < logp.shape[-1]]
    last = start + len(candidate)
    return (sum(float(logp[start + j, t]) for j, t in enumerate(candidate))
            + float(torch.log1p(-logp[last].exp()[ends].sum())))
