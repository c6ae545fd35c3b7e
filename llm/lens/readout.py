"""Lenses at the assistant boundary and count directions (Figure 13; docs/definitions.md §2).

A *lens* reads a residual vector as if it were the last block's output: through the model's own final norm
and unembedding (:class:`OutputHead`). The **logit lens** reads the vector ``h_ℓ`` of location ℓ as it is;
the **tuned lens** first maps it with an affine map ``A_ℓ h_ℓ + b_ℓ`` fitted to predict the last location's
vector ``h_L`` of the same prompt (:class:`RidgeMap`: ridge regression, every output at once, the whole α
grid from one thin SVD of the standardised design — the project's ridge path, :mod:`countlens.probes.ridge`,
for many outputs). At the last location the logit lens *is* the model's own next-token logits.

**What is read** (:func:`first_token_readout`): the boundary's next-token distribution says only which token
the answer starts with. Where every answer begins with the same tokens (the space token before the digits of
the plain template's answers, on tokenizers that write it alone) the read moves to the first answer position
where they differ (:func:`first_tokens`, :func:`countlens.llm.answers.divergence`): the vectors read are then
those of the prompt with the shared tokens appended, and "first token" below means the token at that
position. Per prompt, over the candidate answers (each count ``k``'s answer tokens,
:func:`countlens.llm.answers.candidate_token_ids`): ``logprob``, log p(the correct count's first token)
over the whole vocabulary; ``rank``, that token's rank among the candidates' distinct first tokens (1 = the
most likely); ``expected``, Σ k p(k) over the *single-token* candidates (p normalised over them; in a
vocabulary that splits numbers into digits these are the counts 0..9). Answers that no one token at any
position tells apart are refused.

**Count directions** (:func:`count_slope`, :func:`direction_cosines`): the mean-difference direction ``v``
is the least-squares slope of the count centroids ``c_n`` on ``n`` (adding ``Δ v`` moves a vector as far
as ``Δ`` more items do on average); it and a ridge probe's coefficients are compared with the unembedding
rows ``U_t`` of the number tokens (the candidates' first tokens), raw and through the final norm
(``J(c̄)ᵀ U_t``, ``J`` the final norm's Jacobian at the location's mean boundary vector: the direction of
the residual stream that raises token t's logit there), against random directions as the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from countlens.core.errors import ConfigError, literal

# Attribute names of the final norm on a causal LM's base model (Llama, Qwen, Gemma, Mistral, Phi-3, OLMo-2:
# ``norm``; GPT-2: ``ln_f``; GPT-NeoX: ``final_layer_norm``; others).
FINAL_NORMS = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f", "ln_final")
# Architecture suffixes whose checkpoints carry an output embedding (the unembedding).
HEAD_ARCHITECTURES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
READ_ROWS = 256  # vectors read through the head at once (each makes a (rows, vocabulary) float32 block)


# ----------------------------------------------------------------------------------- the output head

def check_unembedding(config, field: str = "acts") -> None:
    """``ConfigError(field)`` for a model whose checkpoint has no output embedding, from its config alone
    (before any weights load): an architecture that is no causal LM (``LlamaModel``, a base model saved
    without its head) and does not tie its unembedding to the input embedding — loaded as a causal LM, its
    unembedding would be freshly random."""
    archs = list(getattr(config, "architectures", None) or [])
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if archs and not tied and not any(a.endswith(HEAD_ARCHITECTURES) for a in archs):
        raise ConfigError(field, f"{{{field}}} was captured from a model without an output embedding "
                                 f"({literal(', '.join(archs))}, untied): a lens reads the boundary through the "
                                 "model's unembedding; capture a causal LM with its head")


@dataclass
class OutputHead:
    """The model's read-out after its last block: ``logits(h) = cap(U · norm(h) + bias)``, ``norm`` the final
    norm, ``U`` the output embedding (``unembedding``, an ``nn.Linear``), ``cap`` Gemma-2's logit soft-capping
    (``softcap · tanh(x / softcap)``) and the logit scalings some families declare (``scale``)."""

    norm: Any
    unembedding: Any
    softcap: float | None = None
    scale: float = 1.0

    @property
    def weight(self):
        """The unembedding rows (V, d)."""
        return self.unembedding.weight

    @property
    def vocab_size(self) -> int:
        return int(self.weight.shape[0])

    def logits(self, h, ids: Sequence[int] | None = None):
        """(N, V) float32 logits of the residual vectors ``h`` (N, d) (a tensor or an array); with ``ids``,
        (N, len(ids)): only those tokens' logits (no (N, V) block is made)."""
        import torch

        w = self.weight
        x = torch.as_tensor(np.asarray(h) if not isinstance(h, torch.Tensor) else h)
        normed = self.norm(x.to(w.device, w.dtype))
        if ids is None:
            out = self.unembedding(normed)
        else:
            index = torch.as_tensor(np.asarray(ids), device=w.device)
            bias = getattr(self.unembedding, "bias", None)
            out = normed @ w[index].T + (0 if bias is None else bias[index])
        out = out.float() * self.scale
        if self.softcap:
            out = torch.tanh(out / self.softcap) * self.softcap
        return out

    def folded_rows(self, center: np.ndarray, ids: Sequence[int]) -> np.ndarray:
        """``J(center)ᵀ U_t`` (T, d) for the tokens ``ids``: the final norm's Jacobian at ``center`` (d,)
        applied to the unembedding rows — the residual direction that raises token t's logit at
        ``center`` fastest (the norm's scale invariance projects out ``center``'s own direction)."""
        import torch

        w = self.weight
        x = torch.as_tensor(np.asarray(center), dtype=torch.float32, device=w.device)
        with torch.enable_grad():
            jac = torch.func.jacrev(lambda v: self.norm(v[None].to(w.dtype))[0].float())(x)  # (d, d)
        rows = w[torch.as_tensor(list(ids), device=w.device)].detach().float()  # (T, d)
        return (rows @ jac).detach().double().cpu().numpy()


def output_head(model, field: str = "acts") -> OutputHead:
    """The :class:`OutputHead` of a Hugging Face causal LM; ``ConfigError(field)`` for a model without an
    output embedding or whose final norm is not found among :data:`FINAL_NORMS` of its base model."""
    unembedding = model.get_output_embeddings()
    name = type(model).__name__
    if unembedding is None or getattr(unembedding, "weight", None) is None:
        raise ConfigError(field, f"{{{field}}} was captured from a model without an output embedding ({name}): a "
                                 "lens reads the boundary through the model's unembedding")
    base = getattr(model, getattr(model, "base_model_prefix", ""), None) or model
    norm = next((getattr(base, a) for a in FINAL_NORMS if getattr(base, a, None) is not None), None)
    if norm is None:
        raise ConfigError(field, f"{{{field}}}: cannot find the final norm of {name} (none of "
                                 f"{', '.join(FINAL_NORMS)}); this architecture is not supported by the lens")
    config = model.config
    text = getattr(config, "text_config", None) or config
    softcap = getattr(text, "final_logit_softcapping", None)
    scale = float(getattr(text, "logit_scale", None) or 1.0) / float(getattr(text, "logits_scaling", None) or 1.0)
    return OutputHead(norm, unembedding, float(softcap) if softcap else None, scale)


# ------------------------------------------------------------------------------------- the read-out

@dataclass
class FirstTokens:
    """What the next token at the answer's first differing position can say about the answer. ``counts`` (K,)
    the candidate counts; ``first`` (K,) each answer's token at that position; ``distinct`` the distinct such
    tokens in order of first appearance (the *number tokens* whose unembedding rows the count directions are
    compared with); ``single`` (K,) whether the answer ends with that token (the candidates of the expected
    count). ``position``: the answer position read (:func:`countlens.llm.answers.divergence`; 0 = the
    boundary's next token), after ``prefix``, the tokens every answer begins with (teacher-forced)."""

    counts: np.ndarray
    first: np.ndarray
    distinct: np.ndarray
    single: np.ndarray
    position: int = 0
    prefix: tuple[int, ...] = ()

    def index_of(self, correct: Sequence[int]) -> np.ndarray:
        """Per row the index into ``counts`` of its correct count (-1 where it is no candidate)."""
        where = {int(k): i for i, k in enumerate(self.counts)}
        return np.array([where.get(int(n), -1) for n in correct], dtype=np.int64)


def first_tokens(candidates: Sequence[Sequence[int]], counts: Sequence[int], vocab_size: int,
                 field: str = "counts") -> FirstTokens:
    """:class:`FirstTokens` of the candidates' token ids (:func:`countlens.llm.answers.candidate_token_ids`),
    read at the first answer position where they differ (:func:`countlens.llm.answers.divergence`: after a
    space token every answer of the plain template begins with, on tokenizers that write it alone);
    ``ConfigError(field)`` for a token beyond the unembedding's ``vocab_size`` rows, or where no one token per
    answer tells them apart (identical answers, or an answer that ends where the others go on: "1" among "10",
    "11")."""
    from countlens.llm.answers import divergence

    counts = np.asarray([int(k) for k in counts], dtype=np.int64)
    if len(candidates) < 2:
        raise ConfigError(field, f"{{{field}}} holds one count: a read-out over the candidate answers needs two")
    try:
        where = divergence(candidates)
    except ValueError as exc:
        raise ConfigError(field, f"{{{field}}}: " + literal(str(exc))) from None
    if where.ended:
        short = [int(k) for k, c in zip(counts, candidates, strict=True) if len(c) == where.position]
        raise ConfigError(field, f"the answer {short[0]} of {{{field}}} ends where the others go on (every answer "
                                 f"begins with its tokens {literal(list(where.prefix))}): no one token at answer "
                                 f"position {where.position} tells them apart; leave it out or add counts whose "
                                 "answers start differently")
    j = where.position
    first = np.array([int(c[j]) for c in candidates], dtype=np.int64)
    beyond = sorted({int(t) for c in candidates for t in c if int(t) >= vocab_size or int(t) < 0})
    if beyond:
        raise ConfigError(field, f"the answers of {{{field}}} hold token ids {beyond[:5]} beyond the model's "
                                 f"{vocab_size} output rows (the tokenizer has tokens the unembedding lacks); "
                                 "choose counts whose answers the model can write")
    distinct = np.array(list(dict.fromkeys(first.tolist())), dtype=np.int64)
    single = np.array([len(c) == j + 1 for c in candidates], dtype=bool)
    return FirstTokens(counts, first, distinct, single, j, tuple(where.prefix))


@dataclass
class Readout:
    """Per row: ``logprob`` log p(correct first token) over the vocabulary; ``rank`` of the correct first
    token among the distinct first tokens (1 = best; 0 where the count is no candidate); ``expected``
    Σ k p(k) over the single-token candidates (NaN without two of them); ``first_logits`` (N, F) the
    distinct first tokens' logits (for the lens's fit)."""

    logprob: np.ndarray
    rank: np.ndarray
    expected: np.ndarray
    first_logits: np.ndarray


def first_token_readout(logits, tokens: FirstTokens, correct: Sequence[int]) -> Readout:
    """:class:`Readout` of next-token ``logits`` (N, V) (a float tensor) for rows whose counts are ``correct``."""
    import torch

    logits = logits.float()
    index = tokens.index_of(correct)  # (N,)
    lse = torch.logsumexp(logits, dim=-1)  # (N,)
    first_ids = torch.as_tensor(tokens.first, device=logits.device)
    distinct = torch.as_tensor(tokens.distinct, device=logits.device)
    cand = logits[:, distinct].double().cpu().numpy()  # (N, F)
    own = logits[torch.arange(len(index), device=logits.device), first_ids[torch.as_tensor(np.maximum(index, 0))]]
    logprob = (own - lse).double().cpu().numpy()
    slot = {int(t): j for j, t in enumerate(tokens.distinct)}
    mine = np.array([cand[i, slot[int(tokens.first[k])]] if k >= 0 else np.nan for i, k in enumerate(index)])
    rank = np.where(index >= 0, 1 + np.sum(cand > mine[:, None], axis=1), 0)
    logprob = np.where(index >= 0, logprob, np.nan)
    expected = np.full(len(index), np.nan)
    if tokens.single.sum() >= 2:
        single = logits[:, torch.as_tensor(tokens.first[tokens.single], device=logits.device)].double().cpu().numpy()
        p = np.exp(single - single.max(axis=1, keepdims=True))
        expected = (p / p.sum(axis=1, keepdims=True)) @ tokens.counts[tokens.single].astype(np.float64)
    return Readout(logprob, rank.astype(np.int64), expected, cand)


def read_through(head: OutputHead, h: np.ndarray, tokens: FirstTokens, correct: Sequence[int],
                 rows: int = READ_ROWS) -> Readout:
    """:func:`first_token_readout` of the vectors ``h`` (N, d) read through ``head``, ``rows`` at a time."""
    import torch

    parts = []
    with torch.inference_mode():
        for start in range(0, len(h), rows):
            parts.append(first_token_readout(head.logits(h[start:start + rows]), tokens,
                                             list(correct)[start:start + rows]))
    if not parts:
        return Readout(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, len(tokens.distinct))))
    return Readout(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("logprob", "rank", "expected",
                                                                              "first_logits")))


def first_logits(head: OutputHead, h: np.ndarray, tokens: FirstTokens, rows: int = READ_ROWS) -> np.ndarray:
    """(N, F) float64 logits of the distinct first tokens of ``tokens`` for the vectors ``h`` (N, d) read
    through ``head`` (the same block as :attr:`Readout.first_logits`, without the whole vocabulary)."""
    import torch

    with torch.inference_mode():
        parts = [head.logits(h[start:start + rows], tokens.distinct).double().cpu().numpy()
                 for start in range(0, len(h), rows)]
    return np.concatenate(parts) if parts else np.zeros((0, len(tokens.distinct)))


def candidate_kl(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per row KL(p ‖ q) in nats of the softmax distributions of two (N, F) logit blocks (over the same
    first tokens): how far ``other``'s answer-start distribution is from ``reference``'s."""
    def log_softmax(x):
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    lp, lq = log_softmax(np.asarray(reference, np.float64)), log_softmax(np.asarray(other, np.float64))
    return np.sum(np.exp(lp) * (lp - lq), axis=1)


def readout_summary(r: Readout, correct: Sequence[int], tokens: FirstTokens) -> dict[str, Any]:
    """Means over rows of a :class:`Readout`: ``logprob``, ``rank``, ``top1`` (share of rank 1),
    ``expected_corr`` (Pearson correlation of the expected count with the true count; ``None`` where either
    is constant), ``expected_mae`` (mean |expected − n| over the rows whose count is a single-token
    candidate; ``None`` without such rows)."""
    n = np.asarray(correct, dtype=np.float64)
    ok = r.rank > 0
    single = np.isin(n, tokens.counts[tokens.single]) & np.isfinite(r.expected)
    corr = None
    finite = np.isfinite(r.expected)
    if finite.sum() >= 2 and np.std(r.expected[finite]) > 0 and np.std(n[finite]) > 0:
        corr = float(np.corrcoef(r.expected[finite], n[finite])[0, 1])
    return {"logprob": _mean(r.logprob[ok]), "rank": _mean(r.rank[ok]), "top1": _mean(r.rank[ok] == 1),
            "expected_corr": corr, "expected_mae": _mean(np.abs(r.expected[single] - n[single]))}


def answer_rank(model_first_logits: np.ndarray, first_logits: np.ndarray) -> np.ndarray:
    """Per row (N,) the rank (1 = first) among the distinct first tokens, under ``first_logits`` (N, F), of the
    model's own answer: the first token the model's own read-out ``model_first_logits`` (N, F) ranks first
    (ties: the first such column). Where it is not the correct count's, the lens rank of the correct count and
    this one show where the model's answer takes over."""
    mine = np.argmax(model_first_logits, axis=1)
    own = first_logits[np.arange(len(mine)), mine]
    return (1 + np.sum(first_logits > own[:, None], axis=1)).astype(np.int64)


def _mean(x) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()) if x.size else None


# --------------------------------------------------------------------------------- the tuned lens map

class RidgeMap:
    """Ridge regression of every column of ``Y`` (n, p) on ``X`` (n, d) with an unpenalised intercept,
    for any α from one thin SVD: :func:`countlens.probes.ridge.ridge_path` for many outputs at once.

    As :class:`~countlens.probes.RidgePathProbe` does by default, ``X`` is standardised on its rows
    (:func:`~countlens.probes.ridge.standardisation`) and α is *relative* (a multiple of
    :func:`~countlens.probes.ridge.penalty_unit` of the standardised design); α = 0 is the minimum-norm
    least-squares map. ``W(α) = V diag(s / (s² + α)) Uᵀ Yc`` is never formed: predictions go through the
    factors, so any number of α costs O(n k p) each.
    """

    def __init__(self, X: np.ndarray, Y: np.ndarray, standardize: bool = True):
        # The probes' room (scikit-learn behind it) loads only when a lens is fitted: a command's check runs
        # before it, in seconds.
        from countlens.probes import penalty_unit, standardisation

        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64)
        if X.ndim != 2 or Y.ndim != 2 or len(X) != len(Y) or len(X) < 1:
            raise ValueError(f"X must be (n, d) and Y (n, p), got {X.shape} and {Y.shape}")
        self.mean, self.scale = standardisation(X) if standardize else (X.mean(axis=0), np.ones(X.shape[1]))
        Z = (X - self.mean) / self.scale
        self.unit = penalty_unit(Z)
        self.y_mean = Y.mean(axis=0)
        U, self.s, self.Vt = np.linalg.svd(Z, full_matrices=False)  # (n, k), (k,), (k, d)
        self.UtY = U.T @ (Y - self.y_mean)  # (k, p)
        self.cut = np.finfo(np.float64).eps * max(Z.shape) * (self.s[0] if self.s.size else 0.0)

    def factors(self, alpha_rel: float) -> np.ndarray:
        """(k,) ``s / (s² + α)`` at the relative penalty ``alpha_rel`` (α = 0: ``1/s`` above the cut-off)."""
        alpha = float(alpha_rel) * (self.unit if self.unit > 0 else 1.0)
        if alpha == 0:
            return np.where(self.s > self.cut, 1.0 / np.where(self.s > self.cut, self.s, 1.0), 0.0)
        return self.s / (self.s ** 2 + alpha)

    def predict(self, X: np.ndarray, alpha_rel: float) -> np.ndarray:
        """(m, p) predictions for the rows ``X`` (m, d) at ``alpha_rel``."""
        Z = (np.asarray(X, dtype=np.float64) - self.mean) / self.scale
        return ((Z @ self.Vt.T) * self.factors(alpha_rel)) @ self.UtY + self.y_mean

    def coef(self, alpha_rel: float) -> tuple[np.ndarray, np.ndarray]:
        """The map in the inputs' own coordinates: ``(W (d, p), b (p,))`` with ``predict(X) = X W + b``."""
        W = (self.Vt.T * self.factors(alpha_rel)) @ self.UtY / self.scale[:, None]
        return W, self.y_mean - self.mean @ W


@dataclass
class TunedFit:
    """The tuned lens at one location: the selected ``alpha_rel`` (index ``best``), the validation mean KL
    of every α of the grid (``val_kl``), and the test rows' mapped vectors ``mapped`` (n_test, d)."""

    alpha_rel: float
    best: int
    val_kl: list[float]
    mapped: np.ndarray


def fit_tuned_lens(head: OutputHead, tokens: FirstTokens, X: np.ndarray, Y: np.ndarray, parts, alphas,
                   reference_val: np.ndarray) -> TunedFit:
    """Fit the affine map from ``X`` (rows, d) to ``Y`` (rows, d) (the last location's vectors) on the
    training rows of ``parts`` = (train, validation, test) indices, for every relative α of ``alphas``;
    select α by the lowest mean KL on the validation rows between the model's own answer-start distribution
    (``reference_val``: the validation rows' first-token logits, (n_val, F)) and the lens's; return the test
    rows mapped at that α. The lens is fitted to predict what the model will say, not the true count."""
    train, val, test = parts
    fit = RidgeMap(X[train], Y[train])
    kls = []
    for alpha in alphas:
        kls.append(float(np.mean(candidate_kl(reference_val, first_logits(head, fit.predict(X[val], alpha), tokens)))))
    best = int(np.argmin(kls))
    return TunedFit(float(alphas[best]), best, kls, fit.predict(X[test], alphas[best]))


# --------------------------------------------------------------------------------- count directions

def count_slope(acts: np.ndarray, n: Sequence[int]) -> np.ndarray:
    """(d,) the least-squares slope ``v`` of the count centroids on the count: ``c_n ≈ a + n v`` over the
    distinct counts of ``n`` (each centroid once, however many rows it averages), so adding ``Δ v`` moves a
    vector as far as ``Δ`` more items do on average. ``ValueError`` with fewer than two distinct counts."""
    acts = np.asarray(acts, dtype=np.float64)
    n = np.asarray(n)
    counts = np.unique(n)
    if len(counts) < 2:
        raise ValueError("the count direction needs at least two distinct counts")
    centroids = np.stack([acts[n == k].mean(axis=0) for k in counts])  # (C, d)
    x = counts.astype(np.float64) - counts.mean()
    return x @ (centroids - centroids.mean(axis=0)) / float(x @ x)


def random_directions(count: int, d: int, seed: int) -> np.ndarray:
    """(count, d) unit vectors drawn uniformly on the sphere, seeded (the baseline of the angles)."""
    u = np.random.default_rng([int(seed), int(d)]).standard_normal((int(count), int(d)))
    return u / np.linalg.norm(u, axis=1, keepdims=True)


def abs_cosines(directions: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(D, T) |cos| between each direction (D, d) and each row (T, d) (0 for a zero vector)."""
    a = np.atleast_2d(np.asarray(directions, dtype=np.float64))
    b = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.abs(a @ b.T) / np.outer(na, nb)
    return np.nan_to_num(out, nan=0.0)


def random_baseline(random: np.ndarray, rows: np.ndarray) -> dict[str, float]:
    """The |cos| of random directions (R, d) with ``rows`` (T, d): ``mean`` over every pair, and the 50th /
    95th / 99th percentiles over the random directions of their largest |cos| with any row (``max_p50`` ...)."""
    cos = abs_cosines(random, rows)  # (R, T)
    top = cos.max(axis=1)
    return {"mean": float(cos.mean()), "max_p50": float(np.quantile(top, 0.5)),
            "max_p95": float(np.quantile(top, 0.95)), "max_p99": float(np.quantile(top, 0.99))}


def direction_cosines(direction: np.ndarray, rows: np.ndarray, random: np.ndarray) -> dict[str, Any]:
    """How a count direction (d,) lines up with the number tokens' rows (T, d): ``cos`` (T,) signed,
    ``max_abs`` and ``mean_abs`` of |cos|, and ``beyond_random``, the share of the random directions (R, d)
    whose largest |cos| with any row is at least this direction's (an empirical p-value: small = more
    aligned than chance)."""
    d = np.asarray(direction, dtype=np.float64)
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    norm = np.linalg.norm(d) * np.linalg.norm(rows, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.nan_to_num(rows @ d / norm, nan=0.0)
    top = float(np.max(np.abs(cos)))
    share = float(np.mean(abs_cosines(random, rows).max(axis=1) >= top))
    return {"cos": cos.tolist(), "max_abs": top, "mean_abs": float(np.mean(np.abs(cos))), "beyond_random": share}


__all__ = ["FINAL_NORMS", "HEAD_ARCHITECTURES", "check_unembedding", "OutputHead", "output_head", "FirstTokens",
           "first_tokens", "Readout", "first_token_readout", "answer_rank", "read_through", "first_logits", "candidate_kl", "readout_summary",
           "RidgeMap", "TunedFit", "fit_tuned_lens", "count_slope", "random_directions", "abs_cosines",
           "random_baseline", "direction_cosines"]
