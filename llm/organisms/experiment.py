"""Model organisms: an :class:`OrganismConfig` in, a trained chat model folder and an :class:`OrganismResult`
(``organism.json``) out (:mod:`countlens.llm.organisms.train` for the numerics).

The organism is a stock ``LlamaForCausalLM`` with a real tokenizer and chat template (by default the embedded
SmolLM2's), trained on the project's counting prompts — every wording and token pair of the default set, counts
``0..L`` — until its greedy answer is right on ``target_accuracy`` of held-out prompts (seeds from
:data:`HELD_OUT_SEED` on, never trained on). Its folder loads with ``AutoModelForCausalLM.from_pretrained``
and every countlens command runs on it like on any chat model (``--model DIR``).

**Data.** Step ``t`` trains on the prompts ``tB .. (t+1)B − 1`` of one stream: the prompt sets of data seeds
0, 1, 2, ... (each every count, pair and wording once), each shuffled by the organism's ``seed``. The stream is
a function of the step alone, so a resumed run sees the batches an uninterrupted one would.

**The organism** is the moving average of the trained weights (:func:`countlens.llm.organisms.train.update_average`):
the held-out checks, the saved folder and every result are of the average, which settles the last errors the
optimiser's noise keeps flipping.

**Resuming.** Every ``eval_every`` steps the weights, optimiser state and training curve are written to
``DIR/.train/checkpoint.pt`` (atomically); a rerun with the same settings continues from it (``max_steps``
may grow), and a folder whose finished ``organism.json`` has the same settings is reused as it is.

What it can show: a mechanism that is there by construction (the live heads are the only ones that move
information between positions) against which every read-out is checked. What it cannot: a small model trained
on one task is no evidence of how a pretrained model counts.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, UsageError, about, literal
from countlens.core.fields import AtLeast, Positive, check_fields
from countlens.core.io import write_bytes_atomic
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.answers import answer_prompts, answer_string, answer_token_ids, parse_answer
from countlens.llm.models import DEFAULT_MODEL, cache_root, load_tokenizer, resolve_model
from countlens.llm.organisms import train as T
from countlens.llm.prompts import CONFIGURATIONS, DEFAULT_PAIRS, PromptSettings, build_prompts, parse_pairs

HELD_OUT_SEED = 1_000_000  # held-out prompts use data seeds from here on; training seeds count up from 0
CHECKPOINT = Path(".train") / "checkpoint.pt"
WARMUP = 50  # steps of linear learning-rate warm-up (the default of OrganismConfig.warmup)
DECAY = 250  # steps at the peak before the rate falls as decay / step (the default of OrganismConfig.decay): a
# function of the step alone, so a resumed run (whatever its max_steps) follows the schedule an uninterrupted one
# would; the fall settles the last errors
SOFTMAX = ("task", "full")  # the training softmax's vocabulary: the task's tokens, or every token
RESULT_FILE = "organism.json"
HELD_OUT_CSV = "organism_held_out.csv"
# What an organism folder may hold besides its own files: the weights, tokenizer and config files
# save_pretrained writes (any of these names), organism.json and the resume folder.
_OURS = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json",
         RESULT_FILE, HELD_OUT_CSV, CHECKPOINT.parts[0], ".staging")


def parse_live_heads(text: str | None) -> list[list[int]] | None:
    """``"0.1,1.3"`` -> ``[[0, 1], [1, 3]]`` (block.head, 0-based); ``None``/empty/``all`` -> ``None``."""
    if text is None or str(text).strip() in ("", "all"):
        return None
    heads = []
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        block, dot, head = part.partition(".")
        if not dot or not block.isdigit() or not head.isdigit():
            raise ConfigError("live_heads", "{live_heads} takes block.head pairs like 0.1,1.3 (0-based), got "
                                            + literal(repr(part)))
        heads.append([int(block), int(head)])
    return heads


def heads_text(heads) -> str:
    return ",".join(f"{b}.{h}" for b, h in heads)


@dataclass
class OrganismConfig(ExperimentConfig):
    """A counting organism (see the module docstring). Architecture: ``layers`` blocks of ``heads`` heads at
    width ``width`` (head size ``width / heads``, even for rotary positions), MLPs of ``4 width`` or none
    (``attention_only``); ``live_heads`` (block, head pairs; ``None``: all) the heads allowed to write to the
    residual. Task: counts ``0..L`` of every ``pairs`` and ``configs`` wording under the chat template of
    ``tokenizer`` (a model name as ``--model`` takes it; its tokenizer and chat template only). Training:
    AdamW at ``lr`` (:func:`learning_rate`: a linear warm-up over ``warmup`` steps, ``lr`` until step ``decay``,
    then a fall as 1 / step),
    ``batch_size`` prompts a step,
    at most ``max_steps`` steps, until the greedy answers are right on ``target_accuracy`` of the held-out prompts
    (``held_out_seeds`` data seeds of every count, pair and wording), checked every ``eval_every`` steps;
    ``seed`` fixes the initialisation and the order of the prompts; ``softmax``: the training loss's softmax over
    the ``task``'s tokens (every token of its prompts and answers) or the ``full`` vocabulary (accuracy is
    always of the full-vocabulary greedy answer; :mod:`.train`, "Loss")."""

    L: int = 30
    """largest count (counts 0..L)"""
    layers: int = 2
    """transformer blocks"""
    heads: int = 4
    """attention heads per block"""
    width: int = 64
    """residual width (divisible by {heads})"""
    attention_only: bool = False
    """no MLPs (their weights frozen at zero) (default: MLPs of 4 x width)"""
    live_heads: list[list[int]] | None = None
    """the only heads that write to the residual, block.head 0-based, like 0.1,1.3 (default: all)"""
    seed: int = 0
    """initialisation and prompt-order seed"""
    tokenizer: str = DEFAULT_MODEL
    """model whose tokenizer and chat template the organism takes (as --model takes it)"""
    pairs: list[list[str]] = field(default_factory=lambda: [list(p) for p in DEFAULT_PAIRS])
    """target/distractor pairs like a/b,cat/dog (default: the four default pairs)"""
    configs: list[str] = field(default_factory=lambda: list(CONFIGURATIONS))
    lr: float = 5e-3
    """AdamW learning rate"""
    warmup: int = WARMUP
    """steps of the rate's linear warm-up (then constant, then falling as 1 / step)"""
    decay: int = DECAY
    """the step from which the rate falls as DECAY / step (beyond {max_steps}: a constant rate)"""
    batch_size: int = 32
    """prompts per step"""
    max_steps: int = 3000
    """most training steps (a resumed run may raise it)"""
    eval_every: int = 100
    """steps between held-out checks (and checkpoints)"""
    held_out_seeds: int = 2
    target_accuracy: float = 0.99
    """held-out greedy accuracy at which training stops"""
    softmax: str = "task"
    """the training loss's softmax: over the task's tokens (those of its prompts and answers; faster) or the
    full vocabulary; accuracy is always of the full-vocabulary greedy answer"""

    FIELDS: ClassVar[dict] = {"L": AtLeast(1), "layers": AtLeast(1), "heads": AtLeast(1), "width": AtLeast(2),
                              "seed": AtLeast(0), "lr": Positive(), "warmup": AtLeast(1), "decay": AtLeast(1),
                              "batch_size": AtLeast(1), "max_steps": AtLeast(1), "eval_every": AtLeast(1),
                              "held_out_seeds": AtLeast(1),
                              "target_accuracy": Positive()}

    def validate(self) -> OrganismConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot train (reads no file)."""
        check_fields(self, self.FIELDS)
        if isinstance(self.live_heads, str):
            self.live_heads = parse_live_heads(self.live_heads)
        if isinstance(self.pairs, str):
            self.pairs = parse_pairs(self.pairs)
        if self.width % self.heads:
            raise ConfigError("width", f"{{width}} must be divisible by {{heads}}: {self.width} is not a multiple "
                                       f"of {self.heads}", also=("heads",))
        if (self.width // self.heads) % 2:
            raise ConfigError("width", f"{{width}} / {{heads}} is the head size, which rotary positions need even; "
                                       f"got {self.width // self.heads}", also=("heads",))
        if self.softmax not in SOFTMAX:
            raise ConfigError("softmax", f"{{softmax}} is one of {', '.join(SOFTMAX)}, got {literal(repr(self.softmax))}")
        if self.target_accuracy > 1:
            raise ConfigError("target_accuracy", f"{{target_accuracy}} is a fraction in (0, 1], got "
                                                 f"{self.target_accuracy}")
        for b, h in self.live_heads or []:
            if not (0 <= b < self.layers and 0 <= h < self.heads):
                raise ConfigError("live_heads", f"{{live_heads}} names head {b}.{h}, but the organism has blocks "
                                                f"0..{self.layers - 1} and heads 0..{self.heads - 1}",
                                  also=("layers", "heads"))
        if self.live_heads is not None and not self.live_heads:
            raise ConfigError("live_heads", "{live_heads} must name at least one head")
        PromptSettings(L=self.L, counts=[0], pairs=self.pairs, configs=self.configs)  # the prompt fields' checks
        return self

    def identity(self) -> dict[str, Any]:
        """The settings a resumed or reused organism must share (all but how long it may train)."""
        record = asdict(self)
        record.pop("max_steps")
        return record

    def live(self) -> list[tuple[int, int]] | None:
        return None if self.live_heads is None else [(int(b), int(h)) for b, h in self.live_heads]


@dataclass
class OrganismResult(Result):
    """A trained organism (``organism.json`` in its folder). ``folder``: the model folder; ``architecture``,
    ``n_layers``, ``n_heads``, ``d`` (residual width), ``head_dim``, ``mlp_width`` (0: attention-only),
    ``live_heads``/``dead_heads`` ([block, head]); ``norm_placement``: where the architecture normalises;
    ``steps`` trained, ``converged`` (the held-out greedy accuracy reached the target);
    ``curve``: per check (every ``eval_every`` steps) the step, the mean training loss since the last check
    (nats per answer token), the held-out teacher-forced accuracy and the seconds trained; ``held_out``: per
    count ``n`` the held-out prompts, how many countlens's greedy answers (:func:`countlens.llm.answers.answer_prompts`)
    got right and that fraction; ``held_out_accuracy`` over all of them; ``largest_parameter_norm``: the largest
    Euclidean norm of one parameter vector (the organism's ``B``); ``train_seconds``: wall time trained over
    every (resumed) run."""

    FILE: ClassVar[str] = RESULT_FILE
    CSV: ClassVar[str] = HELD_OUT_CSV
    RECORDS: ClassVar[dict[str, str]] = {CSV: "held_out"}
    COMMAND: ClassVar[str] = "countlens organism train"

    config: dict[str, Any]
    folder: str
    tokenizer: str
    architecture: str
    n_layers: int
    n_heads: int
    d: int
    head_dim: int
    mlp_width: int
    live_heads: list[list[int]]
    dead_heads: list[list[int]]
    norm_placement: str
    steps: int
    converged: bool
    curve: list[dict[str, Any]]
    held_out: list[dict[str, Any]]
    held_out_accuracy: float
    n_parameters: int
    largest_parameter_norm: float
    train_seconds: float
    provenance: dict[str, Any] = field(default_factory=dict)

    def accuracy_by_count(self) -> dict[int, float]:
        return {int(r["n"]): float(r["accuracy"]) for r in self.held_out}


@dataclass
class OrganismPlan:
    """A checked run before any training: the tokenizer, the organism's shape, its answers' tokens, the
    held-out prompts and the output folder's state (``resume``: a checkpoint to continue from; ``done``: a
    finished result with these settings)."""

    config: OrganismConfig
    tokenizer: Any
    tokenizer_name: str
    shape: T.Shape
    answers: dict[int, list[int]]
    held_out: list[Any]
    vocab: Any  # the training softmax's token ids (sorted, (K,)), None for the full vocabulary
    out: Path
    done: OrganismResult | None
    resume: Path | None


def answerable(tokenizer, L: int, template: str = "chat") -> None:
    """``ConfigError("L")`` unless every count ``0..L`` is written by ``tokenizer`` as tokens that decode back
    to the answer string, parse to the count, and hold no end-of-turn token."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ConfigError("tokenizer", "the {tokenizer}'s tokenizer has no end-of-turn (eos) token to end an answer")
    for n in range(int(L) + 1):
        ids = answer_token_ids(tokenizer, n, template)
        text = tokenizer.decode(ids)
        if not ids or eos in ids or text != answer_string(n, template) or parse_answer(text) != n:
            raise ConfigError("L", f"the tokenizer cannot write the count {n} as an answer (tokens {ids} read back "
                                   f"as {literal(repr(text))}); choose {{L}} below {n}", also=("tokenizer",))


def check_folder(out: Path, config: OrganismConfig) -> tuple[OrganismResult | None, Path | None]:
    """The state of the output folder: (a finished result with these settings, a checkpoint to resume).
    :class:`UsageError` for a folder holding something else, or an organism with other settings."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"the output {out} is a file, not a folder")
    if not out.exists() or not any(out.iterdir()):
        return None, None
    foreign = sorted(p.name for p in out.iterdir() if p.name not in _OURS)
    if foreign or not ((out / RESULT_FILE).is_file() or (out / CHECKPOINT).is_file()):
        raise UsageError(f"the output folder {out} holds something other than an organism ({', '.join(foreign[:3]) or 'no organism.json'}"
                         f"{', ...' if len(foreign) > 3 else ''}); choose an empty or new folder")
    if (out / RESULT_FILE).is_file():
        done = OrganismResult.read(out / RESULT_FILE)
        if OrganismConfig(**done.config).identity() != config.identity():
            raise UsageError(f"the output folder {out} holds an organism trained with other settings; choose "
                             "another folder (or the same settings to reuse it)")
        if done.converged or done.steps >= config.max_steps or not (out / CHECKPOINT).is_file():
            return done, None
    if (out / CHECKPOINT).is_file():
        import torch

        state = torch.load(out / CHECKPOINT, map_location="cpu", weights_only=False)
        if state.get("identity") != config.identity():
            raise UsageError(f"the output folder {out} holds an unfinished organism with other settings; choose "
                             "another folder (or the same settings to resume it)")
        return None, out / CHECKPOINT
    return None, None


def plan_organism(config: OrganismConfig, out: str | os.PathLike, progress: bool = False) -> OrganismPlan:
    """Check everything before training: the tokenizer (its chat template, the pairs and wordings as one token
    per item, every count 0..L as an answer) and the output folder; build the held-out prompts."""
    config.validate()
    out = Path(out)
    done, resume = check_folder(out, config)
    try:
        with about("tokenizer"):
            ref = resolve_model(config.tokenizer, progress=progress)
    except ConfigError as exc:  # resolve_model words its errors about a `model`: here it is the tokenizer's
        raise exc.under("tokenizer") if exc.field == "model" else exc from None
    tokenizer = load_tokenizer(ref)
    answerable(tokenizer, config.L)
    held_out = build_prompts(tokenizer, _settings(config, [HELD_OUT_SEED + j for j in range(config.held_out_seeds)]))
    answers = {n: answer_token_ids(tokenizer, n) for n in range(config.L + 1)}
    longest = max(p.n_tokens for p in held_out) + max(len(a) for a in answers.values()) + 1
    eos = int(tokenizer.eos_token_id)
    pad = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else eos
    bos = int(tokenizer.bos_token_id) if tokenizer.bos_token_id is not None else eos
    # The context is only RoPE's stated range (nothing is learned per position): room for other commands' longer
    # prompts (the report's full-size capture) and at least twice the longest held-out prompt.
    shape = T.Shape(layers=config.layers, heads=config.heads, width=config.width,
                    mlp_width=0 if config.attention_only else 4 * config.width, vocab=len(tokenizer),
                    context=max(1024, 2 * longest), bos=bos, eos=eos, pad=pad)
    # The task's tokens: every one the prompts (every count, pair and wording; the training seeds differ only in
    # the order of the same items) and the answers hold, and end-of-turn.
    vocab = (T.task_vocabulary([p.ids for p in held_out] + list(answers.values()), [eos])
             if config.softmax == "task" else None)
    return OrganismPlan(config, tokenizer, ref.model_id, shape, answers, held_out, vocab, out, done, resume)


def _settings(config: OrganismConfig, seeds: list[int]) -> PromptSettings:
    return PromptSettings(L=config.L, counts=list(range(config.L + 1)), per_count=1, pairs=config.pairs,
                          configs=config.configs, seeds=seeds, template="chat")


class PromptStream:
    """The training prompts of step ``t`` (see the module docstring, "Data"): data seed ``s``'s prompt set,
    shuffled by ``(seed, s)``, concatenated over ``s = 0, 1, ...``; built lazily, one seed's set kept."""

    def __init__(self, config: OrganismConfig, tokenizer):
        self.config, self.tokenizer = config, tokenizer
        self.per_seed = (config.L + 1) * len(config.pairs) * len(config.configs)
        self._seed, self._prompts = -1, []

    def _set(self, s: int) -> list:
        if s != self._seed:
            prompts = build_prompts(self.tokenizer, _settings(self.config, [s]))
            order = np.random.default_rng([self.config.seed, s]).permutation(len(prompts))
            self._seed, self._prompts = s, [prompts[i] for i in order]
        return self._prompts

    def batch(self, step: int) -> list:
        B = self.config.batch_size
        return [self._set(i // self.per_seed)[i % self.per_seed] for i in range(step * B, (step + 1) * B)]


def learning_rate(peak: float, step: int, warmup: int = WARMUP, decay: int = DECAY) -> float:
    """The rate at ``step`` (0-based): a linear warm-up over ``warmup`` steps, then ``peak`` until ``decay``
    and ``peak * decay / step`` after (a ``decay`` beyond the last step keeps it constant)."""
    return peak * min(1.0, (step + 1) / warmup) / max(1.0, step / decay)


def _rows(plan: OrganismPlan, prompts: list):
    return T.sequences([p.ids for p in prompts], [plan.answers[p.n] for p in prompts], plan.shape.eos, plan.shape.pad)


def held_out_correct(model, plan: OrganismPlan, batch_size: int = 128) -> np.ndarray:
    """(P,) bool: held-out prompts answered right, by the teacher-forced argmax (:mod:`.train`)."""
    model.eval()
    parts = [T.teacher_forced_correct(model, _rows(plan, plan.held_out[i:i + batch_size]))
             for i in range(0, len(plan.held_out), batch_size)]
    return np.concatenate(parts)


def _save_checkpoint(path: Path, model, average, optimiser, step: int, curve: list, seconds: float,
                     identity: dict) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save({"identity": identity, "step": step, "curve": curve, "seconds": seconds, "model": model.state_dict(),
                "average": average.state_dict(), "optimiser": optimiser.state_dict()}, buffer)
    write_bytes_atomic(path, buffer.getvalue())


def _save_folder(model, tokenizer, out: Path) -> None:
    """Write the weights, config and tokenizer into ``out`` through a staging folder, file by file renamed."""
    staging = out / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging))
    tokenizer.save_pretrained(str(staging))
    for item in staging.iterdir():
        os.replace(item, out / item.name)
    staging.rmdir()


def cached_folder(config: OrganismConfig) -> Path:
    """Where the organism of ``config`` is kept for reuse: ``cache_root()/organisms/<digest of its settings>``."""
    key = hashlib.sha256(json.dumps(config.identity(), sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "organisms" / key


def _from_cache(config: OrganismConfig, out: Path) -> OrganismResult | None:
    """Copy the cached organism of ``config`` into the empty or new folder ``out``; its result, or ``None``."""
    cached = cached_folder(config)
    if not (cached / RESULT_FILE).is_file() or (out.exists() and any(out.iterdir())):
        return None
    done = OrganismResult.read(cached)
    if OrganismConfig(**done.config).identity() != config.identity() or not done.converged:
        return None
    shutil.copytree(cached, out, dirs_exist_ok=True)
    done.folder = str(out)
    done.save(out)
    return done


def _to_cache(config: OrganismConfig, out: Path) -> None:
    """Keep a finished organism in the cache (copied into a temporary folder, renamed into place)."""
    cached = cached_folder(config)
    if cached.exists():
        return
    cached.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".organism-", dir=cached.parent))
    shutil.copytree(out, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(CHECKPOINT.parts[0]))
    try:
        os.replace(staging, cached)
    except OSError:  # another run cached it first
        shutil.rmtree(staging, ignore_errors=True)


@dataclass
class OrganismTrainer:
    """The training state of an organism: the trained ``model``, its moving ``average`` (the organism), the
    dead-weight ``masks`` and the ``optimiser``."""

    model: Any
    average: Any
    masks: Any
    optimiser: Any

    @classmethod
    def build(cls, plan: OrganismPlan) -> OrganismTrainer:
        """A fresh organism of the plan's shape (seeded), its average, masks and optimiser."""
        import torch

        config, shape, live = plan.config, plan.shape, plan.config.live()
        model = T.build_model(shape, live, config.seed)
        average = copy.deepcopy(model)  # the organism: the trained weights' moving average
        masks = T.dead_masks(model, shape, live)
        # fused: one kernel for the whole update (the 49k-row embedding's included), 4x faster than the default
        optimiser = torch.optim.AdamW(T.trained_parameters(model, shape), lr=config.lr, betas=(0.9, 0.98),
                                      weight_decay=0.0, fused=True)
        return cls(model, average, masks, optimiser)

    def resume(self, checkpoint: Path) -> tuple[int, list, float]:
        """Load the state kept in ``checkpoint``; its (step, curve, seconds)."""
        import torch

        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        self.model.load_state_dict(state["model"])
        self.average.load_state_dict(state["average"])
        self.optimiser.load_state_dict(state["optimiser"])
        return int(state["step"]), list(state["curve"]), float(state["seconds"])

    def step(self, plan: OrganismPlan, prompts: list, step: int) -> float:
        """One optimiser step on the batch ``prompts`` at the learning rate of ``step``; its loss."""
        import torch

        config, model = plan.config, self.model
        for group in self.optimiser.param_groups:
            group["lr"] = learning_rate(config.lr, step, config.warmup, config.decay)
        model.train()
        loss = T.answer_loss(model, _rows(plan, prompts), plan.vocab)
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        T.apply_masks(model, self.masks, grad=True)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        self.optimiser.step()
        T.apply_masks(model, self.masks, grad=False)  # exact zeros, whatever the optimiser did
        T.update_average(self.average, model, step)  # an average of zeros stays exactly zero
        return float(loss.detach())


def run_organism(config: OrganismConfig, *, out: str | os.PathLike, progress: bool = False,
                 reuse: bool = False, position: int | None = None) -> OrganismResult:
    """Train (or resume, or reuse) the organism of ``config`` in the folder ``out``; returns its result, also
    written to ``out/organism.json``. With ``reuse``, an organism of the same settings trained before (by any
    run with ``reuse``) is copied from the countlens cache (:func:`cached_folder`) instead of trained, and a
    newly trained one is kept there. ``position``: the terminal line (a tqdm position) of the training bar of a
    worker process training beside others, labelled with ``L`` and seed and shown whatever ``progress`` says."""
    from tqdm.auto import tqdm

    plan = plan_organism(config, out, progress)
    if plan.done is not None:
        return plan.done
    if reuse and plan.resume is None:
        cached = _from_cache(config, plan.out)
        if cached is not None:
            return cached
    out = plan.out
    out.mkdir(parents=True, exist_ok=True)
    trainer = OrganismTrainer.build(plan)
    step, curve, seconds = trainer.resume(plan.resume) if plan.resume is not None else (0, [], 0.0)
    stream = PromptStream(config, plan.tokenizer)
    accuracy = curve[-1]["held_out_accuracy"] if curve else 0.0
    losses: list[float] = []
    started = time.perf_counter() - seconds
    where = ({} if position is None else  # a worker's bar, on its own line under its pool's
             {"position": position, "leave": False, "desc": f"organism L={config.L} seed={config.seed}"})
    with tqdm(**{"total": config.max_steps, "initial": step, "unit": "step", "desc": "organism",
                 "disable": not progress and position is None, **where}) as bar:
        while step < config.max_steps and accuracy < config.target_accuracy:
            losses.append(trainer.step(plan, stream.batch(step), step))
            step += 1
            bar.update(1)
            if step % config.eval_every == 0 or step == config.max_steps:
                accuracy = float(held_out_correct(trainer.average, plan).mean())
                seconds = time.perf_counter() - started
                curve.append({"step": step, "loss": float(np.mean(losses)), "held_out_accuracy": accuracy,
                              "seconds": round(seconds, 3)})
                losses = []
                bar.set_postfix(loss=f"{curve[-1]['loss']:.3f}", held_out=f"{accuracy:.3f}")
                _save_checkpoint(out / CHECKPOINT, trainer.model, trainer.average, trainer.optimiser, step, curve,
                                 seconds, config.identity())
    seconds = time.perf_counter() - started
    average = trainer.average
    average.eval()
    _save_folder(average, plan.tokenizer, out)
    result = _result(average, plan, step, curve, seconds)
    result.save(out)
    if result.converged:
        shutil.rmtree(out / CHECKPOINT.parent, ignore_errors=True)
        if reuse:
            _to_cache(config, out)
    return result


def _result(model, plan: OrganismPlan, step: int, curve: list, seconds: float) -> OrganismResult:
    """The result of the trained ``model``: countlens's own greedy answers on the held-out prompts."""
    import torch

    config, shape = plan.config, plan.shape
    with torch.inference_mode():
        answers = answer_prompts(model, plan.tokenizer, plan.held_out, batch_size=64)
    n = np.array([p.n for p in plan.held_out])
    right = np.array([a == p.n for a, p in zip(answers.answer, plan.held_out, strict=True)])
    held = [{"n": int(k), "prompts": int((n == k).sum()), "correct": int(right[n == k].sum()),
             "accuracy": float(right[n == k].mean())} for k in range(config.L + 1)]
    live = config.live()
    dead = T.dead_heads(shape.layers, shape.heads, live)
    accuracy = float(right.mean())
    return OrganismResult(
        config=asdict(config), folder=str(plan.out), tokenizer=plan.tokenizer_name, architecture="llama",
        n_layers=shape.layers, n_heads=shape.heads, d=shape.width, head_dim=shape.head_dim,
        mlp_width=shape.mlp_width,
        live_heads=[[b, h] for b in range(shape.layers) for h in range(shape.heads) if (b, h) not in set(dead)],
        dead_heads=[list(x) for x in dead],
        norm_placement="pre-norm: RMSNorm before attention, before the MLP and before the unembedding",
        steps=step, converged=accuracy >= config.target_accuracy, curve=curve, held_out=held,
        held_out_accuracy=accuracy, n_parameters=int(sum(p.numel() for p in model.parameters())),
        largest_parameter_norm=T.largest_parameter_norm(model), train_seconds=round(seconds, 3),
        provenance=result_provenance(config))


def read_organism(folder: str | os.PathLike) -> OrganismResult:
    """The :class:`OrganismResult` of an organism folder."""
    return OrganismResult.read(Path(folder) / RESULT_FILE)


declare(Experiment(
    "organism", "Model organism: a chat model trained to count, its circuit planted", OrganismConfig, run_organism,
    OrganismResult, order=900, places={"out": "model"}, output="model", options={"progress": True, "reuse": True},
    # Two torch threads, as the other model stages have (the report's stages run one at a time): on the idle
    # 2-core machine a training step takes 97 ms on two and 138 ms on one (BENCHMARKS.md). `organism train`
    # keeps one by default (--threads): on a busy machine two were 3.9x slower.
    threads=2,
    figure="countlens.llm.organisms.figures:draw_organism", plot="countlens.llm.organisms.figures:plot_organism",
    view="countlens.llm.organisms.figures:organism_view",
    # quick and full: the default organism (L = 30, 2 blocks x 4 heads, width 64) with two live heads, one per
    # block, so the checks have zeroed heads to test; test: one block of two heads at L = 3 (seconds), with the
    # full softmax: at L = 3 the task's took twice the steps and left the steering slope at 0.497.
    presets={"quick": OrganismConfig(live_heads=[[0, 1], [1, 3]]),
             "full": OrganismConfig(live_heads=[[0, 1], [1, 3]]),
             "test": OrganismConfig(L=3, layers=1, heads=2, width=16, live_heads=[[0, 1]], pairs=[["a", "b"]],
                                    configs=["count", "tally"], lr=1e-2, batch_size=16, max_steps=300,
                                    eval_every=20, softmax="full")}))


__all__ = ["HELD_OUT_SEED", "OrganismConfig", "OrganismResult", "OrganismPlan", "parse_live_heads", "heads_text",
           "answerable", "check_folder", "plan_organism", "PromptStream", "held_out_correct", "cached_folder", "run_organism",
           "read_organism", "OrganismTrainer"]
