"""The model's own answer to a counting prompt: greedy decoding from the prompt's KV cache, one parse rule,
and the teacher-forced log-probability of the correct answer (docs/definitions.md §2).

One prompt pass (left-padded, so every row's boundary is the last position) yields the boundary logits and
the KV cache; the answer then costs ``answer_tokens`` single-token decode steps, and every teacher-forced
answer one more short forward over its tokens — never another prompt pass.

**Final answers** (``docs/definitions.md`` §2.9), the one mechanism every answer read-out uses (the
correct answer's log-probability, the distribution over counts, ranks, patching's and steering's logit
differences): a candidate is a count's answer string as tokens, without an end-of-turn token (so any
vocabulary's number splitting works: "42" may be one token or two), and its probability is that of the model's
*final* number being that count::

    P(k) = p(k's tokens | prompt) × (1 − p(the next token continues the number | prompt, k's tokens))

the continuation being every token that, written after a digit, starts with an ASCII digit
(:func:`number_continuations`: "0".."9", or "42" in a vocabulary of numbers; never " 5", whose space starts a
new word). Without the second factor "1" would include every longer answer it begins ("10".."19"), and a model
that answers "10" would read near 5 on every tokenizer that splits digits. :func:`score_candidates` sums
``log p(token | prompt, the candidate's tokens before it)`` and adds ``log(1 − continuation mass)`` after its
last token, from one prompt pass's logits and cache, feeding each candidate's tokens but no sequence that
begins a longer one (for the counts 0..100 in a vocabulary of single digits: "0", "100", "11".."19" and
"20".."99"). The candidates' P sum to at most 1 (they are disjoint final answers); :func:`answer_distribution`
normalises over them: ``p(k | prompt)``, the expected count ``Σ k p(k)`` and the correct count's rank.

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
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from countlens.core.errors import ConfigError, literal
from countlens.core.store import ANSWER_COLUMNS, DISTRIBUTION_COLUMNS
from countlens.llm.candidates import Divergence, answer_candidates, counts_with_previous, divergence  # noqa: F401 (re-exported: the callers import them from here)
from countlens.llm.capture.residuals import (
    BoundaryCapture,
    ShardRunner,
    gathered_rows,
    hidden_size,
    pad_batch,
    pad_token_id,
)
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
    log-probability of the correct count as the final answer (:func:`score_candidates`); candidates: (B, K)
    that of every candidate :func:`answer_batch` was given (``None`` without)."""

    tokens: list[list[int]]
    logprob: np.ndarray
    candidates: np.ndarray | None = None

    def texts(self, tokenizer) -> list[str]:
        return [tokenizer.decode(t, skip_special_tokens=True) for t in self.tokens]


def _cache_arg(model) -> str:
    """The forward's KV-cache argument (``past_key_values`` was renamed ``cache`` in transformers 5.x)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cached_forward(model, ids, mask, positions, cache=None, last_only=False):
    """One forward that keeps its KV cache, the step every runner shares (a prompt pass, a boundary step, a
    decode step): ``ids``, ``mask``, ``positions`` (B, T); ``cache`` a pass's cache to extend (``None``: a new
    one). Returns (the last position's logits (B, V) float32, the cache); ``last_only`` computes the logits of
    the last position alone where the model can."""
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
                 prompt_context=None, candidates: Sequence[Sequence[int]] | None = None,
                 continuation=None) -> AnswerBatch:
    """Greedy answers and the correct answer's log-probability for a left-padded batch.

    input_ids, attention_mask: (B, T), left-padded (the boundary is position T - 1 of every row).
    ``correct_ids``: per row the correct answer's token ids (at least one each). ``prompt_context``: a context
    manager active during the prompt pass only (hooks that read or edit the boundary, e.g.
    :class:`countlens.llm.patching.edits.BoundaryEdit`); decode steps run without it. ``candidates``: token-id
    lists scored for every row as well (:attr:`AnswerBatch.candidates`), in the same teacher-forced call as
    the correct answer, before the decode steps extend the cache. ``continuation``: the tokens that continue a
    number (:func:`score_candidates`; default: those of the tokenizer the model was loaded with).
    """
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
    with prompt_context if prompt_context is not None else contextlib.nullcontext():
        logits, cache = cached_forward(model, input_ids, attention_mask, positions, last_only=True)  # (B, V)
    last_pos = positions[:, -1:]  # (B, 1)
    rows = [[list(c), *(list(k) for k in candidates or ())] for c in correct_ids]
    scores = score_candidates(model, logits, cache, attention_mask, last_pos, rows,
                              continuation=continuation)  # (B, 1 + K)
    tokens = greedy_tokens(model, logits, cache, attention_mask, last_pos, stop_ids, answer_tokens, pad_id)
    return AnswerBatch(tokens, scores[:, 0], scores[:, 1:] if candidates else None)


def greedy_tokens(model, logits, cache, attention_mask, last_pos, stop_ids: set[int],
                  answer_tokens: int = ANSWER_TOKENS, pad_id: int = 0) -> list[list[int]]:
    """Greedy decoding after a pass that ended at the boundary, the one decode loop of every runner (a whole
    prompt pass, :func:`answer_batch`; a boundary step, :mod:`countlens.llm.boundary`): per row the ids generated
    (at most ``answer_tokens``, the stop token excluded). ``logits`` (B, V): the boundary's next-token logits;
    ``cache``: the pass's KV cache, extended in place (score the candidates from it first); ``attention_mask``
    (B, T) and ``last_pos`` (B, 1): the pass's mask and boundary position ids; a finished row is fed ``pad_id``."""
    import torch

    B, device = logits.shape[0], logits.device
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
        mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=mask.device)], dim=1)
        logits, cache = cached_forward(model, nxt[:, None], mask, last_pos + step + 1, cache)
    return tokens


# ----------------------------------------------------------------------------- teacher-forced candidates
#
# One mechanism scores every answer countlens reads off a model: the correct answer's log-probability, the
# distribution over counts, the logit differences of patching. A candidate is a count's answer string as
# tokens (no end-of-turn token: an answer "4" and the start of "42" are the same tokens, and vocabularies that
# split numbers into digits need every token of "42"); its log-probability is the sum over its tokens of
# log p(token | prompt, the candidate's tokens before it), read from one prompt pass's boundary logits and KV
# cache — never another prompt pass.

CANDIDATE_ROWS = 64  # candidate sequences fed at once (each carries a copy of its prompt's KV cache)
CANDIDATE_TOKENS = 256  # fed tokens per packed forward: bounds its (rows, tokens, vocabulary) logits
MIN_LD_GAP = 0.05  # nats: a clean-vs-corrupt logit difference below this is too small to normalise by


def candidate_token_ids(tokenizer, counts: Sequence[int], template: str = "chat") -> list[list[int]]:
    """Each count's answer tokens (:func:`answer_token_ids`), in the order of ``counts``."""
    ids = [answer_token_ids(tokenizer, int(k), template) for k in counts]
    empty = [int(k) for k, t in zip(counts, ids, strict=True) if not t]
    if empty:
        raise ValueError(f"the answers {empty} encode to no tokens")
    return ids


def _feeds(candidates: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[int]]:
    """The token sequences to feed after the prompt so that every candidate's tokens beyond its first, and the
    next token after its last, are read: each candidate's tokens, without those that begin another one (the
    longer sequence's logits hold theirs). Returns the feeds and, per candidate, the feed holding it."""
    seqs = sorted({tuple(c) for c in candidates})
    feeds = [p for p in seqs if not any(len(q) > len(p) and q[:len(p)] == p for q in seqs)]
    where = [next(i for i, f in enumerate(feeds) if f[:len(c)] == tuple(c)) for c in candidates]
    return feeds, where


_CONTINUATIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> continuation ids
_DIGITS = frozenset("0123456789")


def number_continuations(tokenizer) -> np.ndarray:
    """The ids (sorted, int64) of the tokens that continue a number written just before them: every token whose
    text, decoded after the digit "1", starts with an ASCII digit ("7", "42"; never " 7" or "▁7", which start
    a new word, nor other scripts' digits, which the parse rule does not read). Decoding after a digit makes the
    test the tokenizer's own for every family (byte-level BPE, SentencePiece with byte fallback, WordPiece).
    Computed once per tokenizer (a 150k vocabulary in about a second)."""
    if tokenizer in _CONTINUATIONS:
        return _CONTINUATIONS[tokenizer]
    anchor = list(tokenizer("1", add_special_tokens=False)["input_ids"])
    base = len(tokenizer.decode(anchor))
    texts = tokenizer.batch_decode([anchor + [i] for i in range(len(tokenizer))])
    ids = np.array([i for i, t in enumerate(texts) if t[base:base + 1] in _DIGITS and len(t) > base],
                   dtype=np.int64)
    _CONTINUATIONS[tokenizer] = ids
    return ids


def continuation_mask(model, vocabulary: int, device, continuation=None):
    """(V,) bool: the tokens that continue a number (``continuation`` ids, else those of the tokenizer
    ``model`` was loaded with, :func:`~countlens.llm.models.tokenizer_of`)."""
    import torch

    if continuation is None:
        from countlens.llm.models import tokenizer_of

        tokenizer = tokenizer_of(model)
        if tokenizer is None:
            raise ValueError("final answers need the model's tokenizer: load the model with load_model (a "
                             "LoadedModel) or pass continuation=number_continuations(tokenizer)")
        continuation = number_continuations(tokenizer)
    ids = torch.as_tensor(np.asarray(continuation, dtype=np.int64), device=device)
    mask = torch.zeros(vocabulary, dtype=torch.bool, device=device)
    mask[ids[ids < vocabulary]] = True
    return mask


def score_candidates(model, logits, cache, attention_mask, last_pos, candidates,
                     max_rows: int = CANDIDATE_ROWS, continuation=None) -> np.ndarray:
    """log P(k) of each candidate as the model's final answer (module docstring: its tokens teacher-forced,
    then no token that continues the number), for each row of a prompt pass: (B, K) float64, nats.

    ``logits`` (B, V): the boundary's next-token logits of the pass; ``cache``: its KV cache (left unchanged);
    ``attention_mask`` (B, T) its mask; ``last_pos`` (B, 1) the boundary's position id. ``candidates``: one list
    of K candidates (token-id lists) for every row, or per row its own list of K. ``continuation``: the ids of
    the tokens that continue a number (default: :func:`number_continuations` of the tokenizer the model was
    loaded with). Candidate tokens are fed after a copy of their row's cache, a row's feeds packed into one
    sequence under a block mask (:func:`_score_packed`) where the model honours a custom attention mask
    (checked once per model against one feed per sequence, which it falls back to; ``max_rows`` sequences at a
    time).
    """
    import torch

    B = logits.shape[0]
    shared = len(candidates) > 0 and isinstance(candidates[0][0], (int, np.integer))
    per_row = [candidates] * B if shared else list(candidates)
    if len(per_row) != B or len({len(c) for c in per_row}) != 1 or any(not t for c in per_row for t in c):
        raise ValueError("candidates: one list of non-empty token lists, or one list of K per row")
    ends = continuation_mask(model, logits.shape[-1], logits.device, continuation)
    first = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
    out = np.zeros((B, len(per_row[0])), dtype=np.float64)
    rows = []  # (row, [(feed, [(candidate, tokens), ...]), ...])
    for b, cands in enumerate(per_row):
        index = torch.tensor([c[0] for c in cands], dtype=torch.long, device=first.device)
        out[b] = first[b, index].double().cpu().numpy()
        feeds, where = _feeds(cands)
        rows.append((b, [(feed, [(k, c) for k, c in enumerate(cands) if where[k] == j])
                         for j, feed in enumerate(feeds)]))
    width = max(sum(len(f) for f, _ in r[1]) for r in rows)
    if (_within_window(model, attention_mask.shape[1] + width)
            and _packs(model, cache, attention_mask, last_pos, rows, ends)):
        step = max(1, min(max_rows, CANDIDATE_TOKENS // width))
        for start in range(0, len(rows), step):
            _score_packed(model, cache, attention_mask, last_pos, rows[start:start + step], out, ends)
        return out
    single = [(b, [fed]) for b, feeds in rows for fed in feeds]  # one feed per sequence
    for start in range(0, len(single), max_rows):
        _score_fed(model, cache, attention_mask, last_pos, single[start:start + max_rows], out, ends,
                   block_mask=False)
    return out


_PACKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> whether packed feeds score right


def _within_window(model, length: int) -> bool:
    """Whether a sequence of ``length`` tokens fits every attention window of ``model`` (a custom mask replaces
    the model's own sliding-window mask, and a sliding layer's cache keeps only its window)."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return True
    return length <= int(window)


def _packs(model, cache, attention_mask, last_pos, rows, ends) -> bool:
    """Whether ``model`` scores packed feeds (:func:`_score_packed`) as it scores one feed per sequence
    (:func:`_score_fed` without the block mask): decided once per model, on the first row with two feeds or more (a model that
    ignored the block mask would let one feed see another), by scoring that row both ways. Attention
    implementations that take no custom 4D mask fail the check and keep one feed per sequence."""
    if model in _PACKS:
        return _PACKS[model]
    row = next((r for r in rows if len(r[1]) > 1), None)
    if row is None:
        return False  # nothing that would tell; undecided
    b, feeds = row
    packed = np.zeros((b + 1, max(k for _, m in feeds for k, _ in m) + 1))
    single = packed.copy()
    try:
        _score_packed(model, cache, attention_mask, last_pos, [row], packed, ends)
    except Exception:  # noqa: BLE001 - an attention implementation that refuses a 4D mask
        _PACKS[model] = False
        return False
    _score_fed(model, cache, attention_mask, last_pos, [(b, [fed]) for fed in feeds], single, ends,
               block_mask=False)
    half = model.get_input_embeddings().weight.dtype.itemsize < 4
    _PACKS[model] = bool(np.allclose(packed, single, rtol=0, atol=5e-2 if half else 1e-3))
    return _PACKS[model]


def _score_packed(model, cache, attention_mask, last_pos, rows, out: np.ndarray, ends) -> None:
    """Each row's feeds packed into one sequence (:func:`_score_fed` under a block mask)."""
    _score_fed(model, cache, attention_mask, last_pos, rows, out, ends, block_mask=True)


def _score_fed(model, cache, attention_mask, last_pos, rows, out: np.ndarray, ends, block_mask: bool) -> None:
    """Feed each row's feeds after its prompt (a copy of its cache; one batch) and add to ``out`` its
    candidates' later tokens' log-probabilities and, after each candidate's last token, the log-probability
    that no token continuing the number follows (``ends``: (V,) bool, the continuing tokens).
    ``rows``: ``(prompt row, [(feed, [(candidate, tokens), ...]), ...])``.

    ``block_mask``: a row's feeds are one sequence, each feed attending to the prompt and to its own earlier
    tokens only (a custom 4D mask, block-diagonal causal over the fed tokens) with positions restarting after
    the boundary; else every row holds one feed, fed under the model's own 2D mask (right-padded)."""
    import torch

    device = attention_mask.device
    R, T = len(rows), attention_mask.shape[1]
    width = max(sum(len(f) for f, _ in feeds) for _, feeds in rows)
    ids = torch.zeros((R, width), dtype=torch.long, device=device)
    offsets = torch.zeros((R, width), dtype=torch.long, device=device)  # each token's place in its feed
    valid = torch.zeros((R, width), dtype=attention_mask.dtype, device=device)
    allowed = torch.zeros((R, width, T + width), dtype=torch.bool, device=device) if block_mask else None
    index = torch.tensor([b for b, _ in rows], dtype=torch.long, device=device)
    starts = []  # per row, where each of its feeds begins
    for i, (_, feeds) in enumerate(rows):
        if not block_mask and len(feeds) != 1:
            raise ValueError("without a block mask every row holds one feed")
        at, mine = 0, []
        for feed, _ in feeds:
            n = len(feed)
            ids[i, at:at + n] = torch.tensor(feed, dtype=torch.long)
            offsets[i, at:at + n] = torch.arange(n)
            valid[i, at:at + n] = 1  # padding after the feeds is never attended to and never read
            if block_mask:
                allowed[i, at:at + n, T + at:T + at + n] = torch.tril(torch.ones((n, n), dtype=torch.bool))
            mine.append(at)
            at += n
        starts.append(mine)
    if block_mask:
        dtype = model.get_input_embeddings().weight.dtype
        allowed[:, :, :T] = attention_mask[index].bool()[:, None, :]  # padding queries see the prompt only
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
        mask = mask[:, None]  # (R, 1, width, T + width)
    else:
        mask = torch.cat([attention_mask[index], valid], dim=1)  # (R, T + width)
    result = model(input_ids=ids, attention_mask=mask, position_ids=last_pos[index] + 1 + offsets, use_cache=True,
                   **{_cache_arg(model): select_cache_rows(cache, index)})
    logp = torch.log_softmax(result.logits.float(), dim=-1)  # (R, width, V)
    stop = torch.logsumexp(logp.masked_fill(ends, float("-inf")), dim=-1).double()  # (R, width): log(1 − cont.)
    for i, (b, feeds) in enumerate(rows):
        for at, (_, members) in zip(starts[i], feeds, strict=True):
            for k, tokens in members:
                later = torch.tensor(tokens[1:], dtype=torch.long, device=logp.device)
                n = len(tokens)
                out[b, k] += float(logp[i, at + torch.arange(n - 1), later].double().sum() + stop[i, at + n - 1])


def select_cache_rows(cache, rows):
    """A KV cache holding the batch rows ``rows`` of ``cache`` (repeats allowed); ``cache`` is left as it is.
    The layers are copied shallowly (selecting makes new tensors), the whole cache only where it has no
    layer list."""
    layers = getattr(cache, "layers", None)
    if isinstance(layers, list):
        out = copy.copy(cache)
        out.layers = [copy.copy(layer) for layer in layers]
    else:
        out = copy.deepcopy(cache)
    out.batch_select_indices(rows)
    return out


def candidate_logprobs(model, tokenizer, prompts, counts: Sequence[int], template: str = "chat",
                       batch_size: int = 16, context=None) -> np.ndarray:
    """log P(k | prompt), k the final answer (:func:`score_candidates`), for every prompt and every count ``k``
    of ``counts``: (P, K) float64, one prompt pass per batch of ``batch_size`` left-padded prompts
    (``context(rows, boundary_index)``: a context manager active during each batch's prompt pass, e.g. a
    patch)."""
    import torch

    candidates = candidate_token_ids(tokenizer, counts, template)
    continuation = number_continuations(tokenizer)
    pad_id = pad_token_id(tokenizer)
    device = model.get_input_embeddings().weight.device
    out = np.zeros((len(prompts), len(counts)), dtype=np.float64)
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            rows = list(range(start, min(start + batch_size, len(prompts))))
            ids, mask, index = pad_batch([prompts[i] for i in rows], pad_id, "left", device)
            positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
            with context(rows, index) if context is not None else contextlib.nullcontext():
                logits, cache = cached_forward(model, ids, mask, positions, last_only=True)
            out[rows] = score_candidates(model, logits, cache, mask, positions[:, -1:], candidates,
                                         continuation=continuation)
    return out


@dataclass
class AnswerDistribution:
    """The model's answer as a distribution over the candidate counts. ``p`` (P, K): the candidates'
    probabilities normalised over the candidates; ``expected`` (P,): Σ k p(k); ``rank`` (P,): the rank of
    the correct count among the candidates by log-probability, 1 = the most likely (ties count in its
    favour); ``-1`` where the correct count is not a candidate."""

    counts: np.ndarray
    p: np.ndarray
    expected: np.ndarray
    rank: np.ndarray


def answer_distribution(logprobs: np.ndarray, counts: Sequence[int],
                        correct: Sequence[int] | None = None) -> AnswerDistribution:
    """:class:`AnswerDistribution` of (P, K) candidate log-probabilities (:func:`candidate_logprobs`) for the
    candidate counts ``counts`` (K,), ranking the ``correct`` count of each row (P,)."""
    logprobs = np.asarray(logprobs, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    shifted = logprobs - logprobs.max(axis=1, keepdims=True)
    p = np.exp(shifted)
    p /= p.sum(axis=1, keepdims=True)
    rank = np.full(len(logprobs), -1, dtype=np.int64)
    if correct is not None:
        for i, n in enumerate(correct):
            hit = np.flatnonzero(counts == float(n))
            if len(hit):
                rank[i] = 1 + int(np.sum(logprobs[i] > logprobs[i, hit[0]]))
    return AnswerDistribution(counts, p, p @ counts, rank)


def normalised_ld(ld: np.ndarray, clean: np.ndarray, corrupt: np.ndarray,
                  min_gap: float = MIN_LD_GAP) -> np.ndarray:
    """``(ld − corrupt) / (clean − corrupt)``: 0 = the corrupted run's logit difference, 1 = the clean run's
    (logit differences of two candidates' log-probabilities, nats). NaN where ``|clean − corrupt| < min_gap``:
    too small a difference to normalise by (report those pairs, do not divide)."""
    ld, clean, corrupt = (np.asarray(x, dtype=np.float64) for x in (ld, clean, corrupt))
    gap = clean - corrupt
    ok = np.abs(gap) >= min_gap
    return np.where(ok, (ld - corrupt) / np.where(ok, gap, 1.0), np.nan)


@dataclass
class Answers:
    """Per prompt: the greedy text (``answer_text``), its parsed integer or ``None`` (``answer``), and the
    log-probability in nats of the correct count as the final answer (``answer_logprob``,
    :func:`score_candidates`)."""

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
    continuation = number_continuations(tokenizer)
    device = model.get_input_embeddings().weight.device
    texts: list[str] = [""] * len(prompts)
    logprob = np.zeros(len(prompts))
    for start in range(0, len(prompts), batch_size):
        rows = list(range(start, min(start + batch_size, len(prompts))))
        group = [prompts[i] for i in rows]
        ids, mask, index = pad_batch(group, pad_id, "left", device)
        correct = [answer_token_ids(tokenizer, p.n, template) for p in group]
        out = answer_batch(model, ids, mask, correct, stop, answer_tokens, pad_id,
                           None if context is None else context(rows, index), continuation=continuation)
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


def checked_candidates(tokenizer, counts: Sequence[int], template: str = "chat",
                       field: str = "counts") -> list[list[int]]:
    """Each count's answer tokens (:func:`candidate_token_ids`), checked before any weights load for a read-out
    that scores the answers: every count's answer must encode to tokens of its own (``ConfigError`` naming
    ``field``: a tokenizer that writes no digits, or writes two counts alike, cannot give their answers). The
    generation prompt is not checked here (:func:`check_generation_prompt` refuses templates such as Mistral's,
    whose user turn ends where the assistant answers without a generation prompt of its own)."""
    try:
        ids = candidate_token_ids(tokenizer, counts, template)
    except ValueError as exc:
        raise ConfigError(field, literal(f"{exc}; the tokenizer cannot write these answers") + f" ({{{field}}})"
                          ) from None
    first: dict[tuple[int, ...], int] = {}
    for k, tokens in zip(counts, ids, strict=True):
        other = first.setdefault(tuple(tokens), int(k))
        if other != int(k):
            raise ConfigError(field, f"the answers {other} and {int(k)} of {{{field}}} encode to the same tokens "
                                     f"{literal(list(tokens))}: the tokenizer cannot tell these counts apart")
    return ids


def answering_runner(loaded: LoadedModel, locations: Sequence[int] | None, batch_size: int,
                     answer_tokens: int = ANSWER_TOKENS, template: str = "chat",
                     candidates: Sequence[int] | None = None, positions: str = "boundary") -> ShardRunner:
    """A capture :class:`~countlens.llm.capture.residuals.ShardRunner` that also records each prompt's answer
    (``answer_text``, ``answer``, ``answer_logprob``) from the same prompt pass: the capture hooks read the
    boundary (or every kept position, :func:`~countlens.llm.capture.residuals.kept_positions`) during it, then the answer
    is decoded from its KV cache. Batches are left-padded and the whole model runs (no early stop).

    With ``candidates`` (counts, :func:`answer_candidates`), also the answer as a distribution over them, from
    the same prompt pass's logits and cache before decoding (:func:`score_candidates`, one call with the
    correct answer): ``answer_logprobs`` (per row every candidate's log-probability as the final answer),
    ``answer_expected`` and ``answer_rank`` (:func:`answer_distribution`)."""
    model, tokenizer = loaded.model, loaded.tokenizer
    hooks = BoundaryCapture(model, locations, early_stop=False)
    stop, pad_id = stop_token_ids(model, tokenizer), pad_token_id(tokenizer)
    device = model.get_input_embeddings().weight.device
    counts = None if candidates is None else [int(k) for k in candidates]
    candidate_ids = None if counts is None else candidate_token_ids(tokenizer, counts, template)
    continuation = number_continuations(tokenizer)

    def run(group: list[Prompt]):
        ids, mask, index = pad_batch(group, pad_id, "left", device)
        if positions == "boundary":
            hooks.expect(index)
        else:
            rows, at = gathered_rows(group, index, positions)
            hooks.expect(at, rows)
        out = answer_batch(model, ids, mask, [answer_token_ids(tokenizer, p.n, template) for p in group], stop,
                           answer_tokens, pad_id, prompt_context=hooks, candidates=candidate_ids,
                           continuation=continuation)
        texts = out.texts(tokenizer)
        values = {"answer_text": texts, "answer": [parse_answer(t) for t in texts],
                  "answer_logprob": out.logprob.tolist()}
        if counts is not None:
            dist = answer_distribution(out.candidates, counts, [p.n for p in group])
            values.update(answer_logprobs=out.candidates.tolist(), answer_expected=dist.expected.tolist(),
                          answer_rank=dist.rank.tolist())
        return hooks.result().numpy(), values
    columns = ANSWER_COLUMNS + (DISTRIBUTION_COLUMNS if counts is not None else ())
    return ShardRunner(hooks.names, run, batch_size, hidden_size(model.config), columns, positions=positions)
