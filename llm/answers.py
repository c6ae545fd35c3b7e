"""The model's own answer to a counting prompt: greedy decoding from the prompt's KV cache, one parse rule,
and the teacher-forced log-probability of the correct answer (docs/definitions.md §2).

One prompt pass (left-padded, so every row's boundary is the last position) yields the boundary logits and
the KV cache; the answer then costs ``answer_tokens`` single-token decode steps, and the correct answer's
log-probability one more short forward over its tokens — never another prompt pass.

**Parse rule.** The answer is the integer written in the generated text when the text holds exactly one
number, a number being a maximal run of ASCII digits, optionally preceded by ``-``. Anything else — no
number (``""``, ``"forty-two"``) or several (``"4 2"``, ``"1,000"``, ``"4.5"``) — is *unparsed* (``None``),
never guessed. Number words are not read: the prompts ask for a number. A number of more than 18 digits
(no count is that large, and it would not fit the capture's int64 ``answer`` column; a small model can
repeat a digit until its token budget ends, ``"1111111111111111111"``) is unparsed too.

**Correct answer string.** The count's decimal digits as the assistant would start its turn: ``"42"`` after
a chat template's boundary, ``" 42"`` after the plain template's ``Answer:``.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from countlens.core.errors import ConfigError
from countlens.core.store import ANSWER_COLUMNS
from countlens.llm.capture import BoundaryCapture, ShardRunner, hidden_size, pad_batch, pad_token_id
from countlens.llm.models import LoadedModel
from countlens.llm.prompts import Prompt

ANSWER_TOKENS = 16  # small chat models write a short sentence before the number
_NUMBER = re.compile(r"-?[0-9]+")
_MAX_DIGITS = 18  # every such integer fits int64


def parse_answer(text: str) -> int | None:
    """The integer of ``text`` by the parse rule (exactly one number), else ``None``."""
    numbers = _NUMBER.findall(text or "")
    if len(numbers) != 1 or len(numbers[0].lstrip("-")) > _MAX_DIGITS:
        return None
    return int(numbers[0])


def answer_string(n: int, template: str = "chat") -> str:
    """The correct answer string for count ``n``: ``"42"`` (chat) or ``" 42"`` (plain template)."""
    return f" {int(n)}" if template == "plain" else str(int(n))


def answer_token_ids(tokenizer, n: int, template: str = "chat") -> list[int]:
    """Token ids of :func:`answer_string` (no special tokens)."""
    return list(tokenizer(answer_string(n, template), add_special_tokens=False)["input_ids"])


def stop_token_ids(model, tokenizer) -> set[int]:
    """The ids that end an answer: the generation config's EOS ids (as ``generate`` uses), else the
    tokenizer's EOS."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


@dataclass
class AnswerBatch:
    """Answers of one batch. tokens: per row the generated ids (stop token excluded); logprob: (B,) natural
    log-probability of the correct answer string under teacher forcing."""

    tokens: list[list[int]]
    logprob: np.ndarray

    def texts(self, tokenizer) -> list[str]:
        return [tokenizer.decode(t, skip_special_tokens=True) for t in self.tokens]


def _cache_arg(model) -> str:
    """The forward's KV-cache argument (``past_key_values`` was renamed ``cache`` in transformers 5.x)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _forward(model, ids, mask, positions, cache=None, last_only=False):
    """One forward with the KV cache: (last position's logits (B, V) float32, the cache)."""
    params = inspect.signature(model.forward).parameters
    cache_arg = _cache_arg(model)
    kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "use_cache": True}
    if cache is not None:
        kwargs[cache_arg] = cache
    if last_only and "logits_to_keep" in params:
        kwargs["logits_to_keep"] = 1  # (B, 1, V) instead of (B, T, V)
    out = model(**kwargs)
    return out.logits[:, -1].float(), getattr(out, cache_arg)


def answer_batch(model, input_ids, attention_mask, correct_ids: Sequence[Sequence[int]], stop_ids: set[int],
                 answer_tokens: int = ANSWER_TOKENS, pad_id: int = 0,
                 prompt_context=None) -> AnswerBatch:
    """Greedy answers and the correct answer's log-probability for a left-padded batch.

    input_ids, attention_mask: (B, T), left-padded (the boundary is position T - 1 of every row).
    ``correct_ids``: per row the correct answer's token ids (at least one each). ``prompt_context``: a context
    manager active during the prompt pass only (hooks that read or edit the boundary, e.g.
    :class:`countlens.llm.patching.BoundaryEdit`); decode steps run without it.
    """
    import torch

    B = input_ids.shape[0]
    device = input_ids.device
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
    with prompt_context if prompt_context is not None else contextlib.nullcontext():
        logits, cache = _forward(model, input_ids, attention_mask, positions, last_only=True)  # (B, V)
    last_pos = positions[:, -1:]  # (B, 1)
    logprob = _teacher_forced(model, logits, copy.deepcopy(cache), attention_mask, last_pos, correct_ids)
    tokens: list[list[int]] = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    stop = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    mask = attention_mask
    for step in range(answer_tokens):
        nxt = torch.argmax(logits, dim=-1)  # (B,)
        finished = torch.isin(nxt, stop) | done
        for row in torch.nonzero(~finished).flatten().tolist():
            tokens[row].append(int(nxt[row]))
        done = finished
        if bool(done.all()) or step == answer_tokens - 1:
            break
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)
        logits, cache = _forward(model, nxt[:, None], mask, last_pos + step + 1, cache)
    return AnswerBatch(tokens, logprob)


def _teacher_forced(model, first_logits, cache, attention_mask, last_pos, correct_ids) -> np.ndarray:
    """Σ log p(correct token | prompt, earlier correct tokens) per row: (B,) float64."""
    import torch

    B = first_logits.shape[0]
    device = first_logits.device
    k = max(len(c) for c in correct_ids)
    if min(len(c) for c in correct_ids) < 1:
        raise ValueError("every correct answer needs at least one token")
    target = torch.zeros((B, k), dtype=torch.long, device=device)
    valid = torch.zeros((B, k), dtype=torch.bool, device=device)
    for row, ids in enumerate(correct_ids):
        target[row, :len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        valid[row, :len(ids)] = True
    logp = torch.log_softmax(first_logits, dim=-1).gather(1, target[:, :1])  # (B, 1)
    if k > 1:  # feed tokens 1..k-1 (right-padded; a pad only follows the tokens that count)
        mask = torch.cat([attention_mask, valid[:, :-1].to(attention_mask.dtype)], dim=1)
        positions = last_pos + 1 + torch.arange(k - 1, device=device)[None, :]  # (B, k-1)
        out = model(input_ids=target[:, :-1], attention_mask=mask, position_ids=positions, use_cache=True,
                    **{_cache_arg(model): cache})
        rest = torch.log_softmax(out.logits.float(), dim=-1).gather(2, target[:, 1:, None])[..., 0]  # (B, k-1)
        logp = torch.cat([logp, rest], dim=1)
    return (logp.double() * valid).sum(dim=1).cpu().numpy()


@dataclass
class Answers:
    """Per prompt: the greedy text (``answer_text``), its parsed integer or ``None`` (``answer``), and the
    correct answer's teacher-forced log-probability in nats (``answer_logprob``)."""

    answer_text: list[str]
    answer: list[int | None]
    answer_logprob: list[float]

    def accuracy(self, counts: Sequence[int]) -> float:
        """Exact accuracy: the parsed answer equals the count (an unparsed answer is wrong)."""
        return float(np.mean([a == int(n) for a, n in zip(self.answer, counts, strict=True)]))


def answer_prompts(model, tokenizer, prompts, template: str = "chat", batch_size: int = 16,
                   answer_tokens: int = ANSWER_TOKENS, context=None) -> Answers:
    """Answers for ``prompts`` (:class:`countlens.llm.prompts.Prompt`, in their order), in left-padded batches
    of ``batch_size``. ``context(rows, boundary_index)`` may return a context manager for each batch's
    prompt pass (``rows``: the batch's indices into ``prompts``; ``boundary_index``: (B,) positions)."""
    pad_id = pad_token_id(tokenizer)
    stop = stop_token_ids(model, tokenizer)
    device = model.get_input_embeddings().weight.device
    texts: list[str] = [""] * len(prompts)
    logprob = np.zeros(len(prompts))
    for start in range(0, len(prompts), batch_size):
        rows = list(range(start, min(start + batch_size, len(prompts))))
        group = [prompts[i] for i in rows]
        ids, mask, index = pad_batch(group, pad_id, "left", device)
        correct = [answer_token_ids(tokenizer, p.n, template) for p in group]
        out = answer_batch(model, ids, mask, correct, stop, answer_tokens, pad_id,
                           None if context is None else context(rows, index))
        for i, text in zip(rows, out.texts(tokenizer), strict=True):
            texts[i] = text
        logprob[rows] = out.logprob
    return Answers(texts, [parse_answer(t) for t in texts], logprob.tolist())


def check_generation_prompt(tokenizer, template: str) -> None:
    """``ConfigError("template")`` unless a prompt's end is where the assistant starts answering: the plain template
    ends in ``Answer:``; a chat template must add a generation prompt (else the "answer" would continue the
    user's turn)."""
    if template == "plain":
        return
    turn = [{"role": "user", "content": "How many?"}]
    try:
        with_prompt = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
        without = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=False)
    except (ValueError, TypeError, AttributeError):
        with_prompt = without = None
    if with_prompt is None or with_prompt == without:
        raise ConfigError("template", "answers need a chat template with a generation prompt (the assistant's "
                                      'turn); this model has none: pass {template:plain} to answer after "Answer:"')


def answering_runner(loaded: LoadedModel, locations: Sequence[int] | None, batch_size: int,
                     answer_tokens: int = ANSWER_TOKENS, template: str = "chat") -> ShardRunner:
    """A capture :class:`~countlens.llm.capture.ShardRunner` that also records each prompt's answer
    (``answer_text``, ``answer``, ``answer_logprob``) from the same prompt pass: the capture hooks read the
    boundary during it, then the answer is decoded from its KV cache. Batches are left-padded and the whole
    model runs (no early stop)."""
    model, tokenizer = loaded.model, loaded.tokenizer
    hooks = BoundaryCapture(model, locations, early_stop=False)
    stop, pad_id = stop_token_ids(model, tokenizer), pad_token_id(tokenizer)
    device = model.get_input_embeddings().weight.device

    def run(group: list[Prompt]):
        ids, mask, index = pad_batch(group, pad_id, "left", device)
        hooks.expect(index)
        out = answer_batch(model, ids, mask, [answer_token_ids(tokenizer, p.n, template) for p in group], stop,
                           answer_tokens, pad_id, prompt_context=hooks)
        texts = out.texts(tokenizer)
        return hooks.result().numpy(), {"answer_text": texts, "answer": [parse_answer(t) for t in texts],
                                        "answer_logprob": out.logprob.tolist()}
    return ShardRunner(hooks.names, run, batch_size, hidden_size(model.config), ANSWER_COLUMNS)
