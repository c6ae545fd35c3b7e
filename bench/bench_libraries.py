"""Figure 11's patching and the component patching (issue 31) against the libraries a user would otherwise pick,
on the embedded SmolLM2-135M-Instruct: the same cells written with nnsight (a plain loop, one ``trace`` per cell)
and with TransformerLens's ``patching`` module, against countlens's own experiment calls; equal cell by cell (the
largest difference of the patched logit difference LD = log P(n) − log P(n − 1), one-token answers), and the
time of each.

P is the final-answer probability of SPEC §3, as countlens scores it: ``log P(k) = log p(k | prompt) +
log(1 − Σ_{t continues a number} p(t | prompt, k))``. Each reference computes it as a user of its library would:
one forward of the prompt followed by the candidate token per candidate (the patch at the same prompt
position(s) as before, so the boundary is position −2), log p(candidate) read at −2 and the stop factor at −1,
the continuing tokens being ``countlens.llm.answers.number_continuations`` (a definition, not the mechanism
compared). So the references run twice as many forwards as the plain next-token logit difference needs: that is
the fair comparison, because countlens computes the stop factor too (it feeds the candidates after one cached
prompt pass).

    OMP_NUM_THREADS=1 python bench/bench_libraries.py [--L 12] [--count 5] [--flip first] [--location-step 2]
        [--parts positions,components,patching] [--source 6] [--answer-tokens 1]

The default pair (count 5, its first target turned) is the one of counts 2..9 at L = 12 whose clean and corrupted
logit differences lie furthest apart in the right direction (0.14 nats; most pairs differ by under 0.03), so a cell
patched at the wrong place would show.

(a) Figure 11: the clean prompt's residual at (location, position) written into its corrupted twin's run (one
target turned into the distractor), every ``location_step``-th location and the last, every position from the
first item to the boundary: ``run_position_patching`` against nnsight (``embed_tokens`` / ``layers[l]`` output
set from the clean trace) and ``generic_activation_patch`` with ``layer_pos_patch_setter`` on ``hook_resid_pre``
(``hook_resid_post`` for the last location) of a ``TransformerBridge``.
(b) Components: the twin's attention and MLP writes and every head's output (the attention output projection's
input, one head's slice) at the boundary written into the clean run: ``run_components --source twin --scope
boundary`` against nnsight. TransformerLens's side of (b) is bench/bench_component_patching.py.
(d) Figure 9a (issue 46): the source prompt's boundary residual written into the target prompt's run at every
location, one pair (target ``--count``, source ``--source``, next to it by default, so that countlens's candidates
n_t..n_s are the two answers the reference scores): ``run_patching`` (the boundary-step runner: the
target's prefix once, every location a row of one boundary step, the clean run a row too, the candidates
teacher-forced and ``--answer-tokens`` greedy tokens decoded from the step's cache) against nnsight, one
``trace`` per cell and candidate (``embed_tokens`` / ``layers[l]`` output set at the boundary from the source's
trace). Both score LD = log P(n_s) − log P(n_t) of the final answers.
(c) Memory (``--memory-only``, no nnsight needed): the peak memory of one boundary step of 64 cells from a
200-token prompt's cache against one cell, with the rows sharing the prefix cache (countlens.llm.boundary) and
with a copy of it per row (the runner before issue 46), each way in a process of its own.

Each library runs on its own freshly loaded copy of the model (nnsight and the bridge wrap the modules they are
given). countlens's times are its whole experiment calls (``run_components`` with its DLA pass and greedy answers),
so its ratios are conservative; nnsight's and TransformerLens's runs every cell, as a plain loop does (countlens skips
the cells whose clean and corrupted values are equal: they are the corrupted run). nnsight is the ``bench`` extra
(``pip install -e .[bench]``), never a runtime dependency: without it the bench says so and exits 0. A cell that
differs by more than ``TOLERANCE`` nats exits 1.
"""

import argparse
import contextlib
import io
import os
import sys
import time

import numpy as np
import torch

from countlens.llm.answers import candidate_token_ids, number_continuations
from countlens.llm.components.experiment import ComponentsConfig, plan_components, run_components
from countlens.llm.models import ModelSpec, load_model, quiet_transformers
from countlens.llm.positions.experiment import PositionPatchingConfig, prompt_pairs, run_position_patching
from countlens.llm.prompts import PromptSettings

# float32 runs of the same cells agree to ~1e-5 nats (batched against one row, sdpa against eager); a cell patched
# at the wrong place or with the wrong run differs by far more
TOLERANCE = 1e-3


def prompt_settings(args) -> PromptSettings:
    """One clean prompt (its twin built by each experiment): count ``args.count``, ``args.L`` items."""
    return PromptSettings(L=args.L, counts=[args.count], per_count=1, pairs=[["a", "b"]], configs=["count"],
                          seeds=[0])


def one_token_answers(tok, n: int, template: str) -> tuple[int, int]:
    """The answer tokens of ``n`` and ``n − 1`` (one token each: each candidate is one token fed after the
    prompt)."""
    return one_token_answers_of(tok, [n, n - 1], template)


def one_token_answers_of(tok, counts, template: str) -> tuple[int, ...]:
    """The answer token of each count of ``counts`` (one token each)."""
    ids = candidate_token_ids(tok, counts, template)
    if any(len(t) != 1 for t in ids):
        sys.exit(f"the answers {list(counts)} are not one token each; choose one-digit counts")
    return tuple(t[0] for t in ids)


def final_logprob(logits, cand: int, stops) -> torch.Tensor:
    """log P(``cand`` is the final answer) in nats, a 0-d float64 tensor, from the logits (≥ 2, V) of the prompt
    followed by ``cand``: log p(cand) at the boundary (position −2) plus log(1 − Σ_{t ∈ stops} p(t)) at the last
    position (−1); ``stops`` (S,) int64: the tokens that continue a number (``number_continuations``)."""
    boundary = torch.log_softmax(logits[-2].double(), dim=-1)[cand]
    return boundary + torch.log1p(-torch.softmax(logits[-1].double(), dim=-1)[stops].sum())


def with_token(ids, cand: int) -> torch.Tensor:
    """(1, T + 1): the prompt ``ids`` followed by the candidate token ``cand``."""
    return torch.tensor([list(ids) + [cand]])


def fresh_model():
    return load_model("default", progress=False)


# ------------------------------------------------------------------------------------ (a) Figure 11


def nnsight_positions(model, pair, locations, positions, n_tok, m_tok, stops) -> np.ndarray:
    """(locations, positions) LD of the corrupted run with the clean residual written at each cell: one trace per
    cell and candidate, the corrupted prompt followed by the candidate (final answers, module docstring)."""
    from nnsight import NNsight

    nm = NNsight(model)

    def site(loc):  # location 0: the embeddings (block 0's input); l >= 1: block l - 1's output
        return nm.model.embed_tokens if loc == 0 else nm.model.layers[loc - 1]

    clean = torch.tensor([pair.clean.ids])
    corrupt = {c: with_token(pair.corrupt.ids, c) for c in (n_tok, m_tok)}
    out = np.zeros((len(locations), len(positions)))
    with torch.no_grad():
        saved = []  # made outside the trace: nnsight hands back only what is saved or mutated in it
        with nm.trace(clean):
            for loc in locations:
                saved.append(site(loc).output.clone().save())
        for j, loc in enumerate(locations):
            for k, p in enumerate(positions):
                final = {}
                for c, ids in corrupt.items():
                    with nm.trace(ids):
                        site(loc).output[:, p] = saved[j][:, p]
                        logits = nm.output.logits[0, -2:].save()
                    final[c] = float(final_logprob(logits, c, stops))
                out[j, k] = final[n_tok] - final[m_tok]
    return out


def bridge_of(loaded):
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(loaded.location or loaded.model_id, hf_model=loaded.model,
                                               tokenizer=loaded.tokenizer, device="cpu", dtype=loaded.model.dtype)


def transformer_lens_positions(bridge, N, pair, locations, positions, n_tok, m_tok, stops) -> np.ndarray:
    """The same cells through ``generic_activation_patch`` (``layer_pos_patch_setter``, the cells as an
    ``index_df``) on ``bridge`` (N blocks): location l < N is ``blocks.{l}.hook_resid_pre``, location N
    ``blocks.{N-1}.hook_resid_post``; one call per candidate, its corrupted tokens the corrupted prompt followed by
    the candidate, its metric the candidate's final log-probability. The clean run's cache is made here, as a
    user's code would."""
    import pandas as pd
    from transformer_lens import patching

    clean = torch.tensor([pair.clean.ids])

    def metric_of(cand):
        return lambda logits: final_logprob(logits[0], cand, stops)

    out = np.zeros((len(locations), len(positions)))
    with torch.no_grad():
        _, cache = bridge.run_with_cache(clean)
        for name, rows, layer_of in (("resid_pre", [j for j, loc in enumerate(locations) if loc < N], lambda loc: loc),
                                     ("resid_post", [j for j, loc in enumerate(locations) if loc == N],
                                      lambda loc: loc - 1)):
            if not rows:
                continue
            index = pd.DataFrame({"layer": [layer_of(locations[j]) for j in rows for _ in positions],
                                  "pos": [p for _ in rows for p in positions]})
            final = {}
            for c in (n_tok, m_tok):
                with contextlib.redirect_stderr(io.StringIO()):  # its progress bar, one line per cell
                    final[c] = patching.generic_activation_patch(bridge, with_token(pair.corrupt.ids, c), cache,
                                                                 metric_of(c),
                                                                 patch_setter=patching.layer_pos_patch_setter,
                                                                 activation_name=name, index_df=index)
            values = final[n_tok].double() - final[m_tok].double()
            out[rows] = values.numpy().reshape(len(rows), len(positions))
    return out


# ------------------------------------------------------------------------------------ (b) components


def nnsight_components(model, clean_ids, twin_ids, n_tok, m_tok, n_heads, stops) -> dict:
    """{(layer, kind, head): LD change} of the clean run with one of the twin's boundary writes (``attn``, ``mlp``)
    or one head's slice of the output projection's input (``head``) written in at the boundary: one trace per
    cell and candidate, the clean prompt followed by the candidate (so the boundary is position −2)."""
    from nnsight import NNsight

    nm = NNsight(model)
    layers = nm.model.layers
    hd = model.config.hidden_size // n_heads
    twin = torch.tensor([twin_ids])
    clean = {c: with_token(clean_ids, c) for c in (n_tok, m_tok)}

    def patched(write) -> float:
        final = {}
        for c, ids in clean.items():
            with nm.trace(ids):
                write()
                logits = nm.output.logits[0, -2:].save()
            final[c] = float(final_logprob(logits, c, stops))
        return final[n_tok] - final[m_tok]

    out = {}
    with torch.no_grad():
        z, attn, mlp = [], [], []  # made outside the trace (see nnsight_positions)
        with nm.trace(twin):
            for layer in layers:  # in the order the forward reaches them
                z.append(layer.self_attn.o_proj.input[:, -1].clone().save())
                attn.append(layer.self_attn.output[0][:, -1].clone().save())
                mlp.append(layer.mlp.output[:, -1].clone().save())
        base = patched(lambda: None)
        for b, layer in enumerate(layers):
            def attn_write(b=b, layer=layer):
                layer.self_attn.output[0][:, -2] = attn[b]

            def mlp_write(b=b, layer=layer):
                layer.mlp.output[:, -2] = mlp[b]
            out[(b, "attn", None)] = patched(attn_write) - base
            out[(b, "mlp", None)] = patched(mlp_write) - base
            for h in range(n_heads):
                def head_write(b=b, layer=layer, h=h):
                    layer.self_attn.o_proj.input[:, -2, h * hd:(h + 1) * hd] = z[b][:, h * hd:(h + 1) * hd]
                out[(b, "head", h)] = patched(head_write) - base
    return out


# ------------------------------------------------------------------------------------ (d) Figure 9a


def nnsight_boundary_patching(model, source_ids, target_ids, locations, s_tok, t_tok, stops) -> np.ndarray:
    """(locations,) LD = log P(n_s) − log P(n_t) of the target run with the source's boundary residual written at
    each location: one trace per cell and candidate, the target prompt followed by the candidate (so the
    boundary is position −2), the source's residuals saved from one trace of it."""
    from nnsight import NNsight

    nm = NNsight(model)

    def site(loc):  # location 0: the embeddings (block 0's input); l >= 1: block l - 1's output
        return nm.model.embed_tokens if loc == 0 else nm.model.layers[loc - 1]

    target = {c: with_token(target_ids, c) for c in (s_tok, t_tok)}
    out = np.zeros(len(locations))
    with torch.no_grad():
        saved = []  # made outside the trace (see nnsight_positions)
        with nm.trace(torch.tensor([source_ids])):
            for loc in locations:
                saved.append(site(loc).output[:, -1].clone().save())
        for j, loc in enumerate(locations):
            final = {}
            for c, ids in target.items():
                with nm.trace(ids):
                    site(loc).output[:, -2] = saved[j]
                    logits = nm.output.logits[0, -2:].save()
                final[c] = float(final_logprob(logits, c, stops))
            out[j] = final[s_tok] - final[t_tok]
    return out


def boundary_patching(args, stops) -> None:
    """(d): ``run_patching`` on one pair at every location against :func:`nnsight_boundary_patching`; prints,
    records the row ``nnsight_boundary_patching`` and exits 1 where a cell differs by more than ``TOLERANCE``.
    countlens runs as a stage of ``reproduce`` does: its model, tokenizer and config read once into a
    :class:`~countlens.llm.models.ModelPool` before (the reference gets its prompts' token ids made)."""
    from countlens.llm.models import ModelPool
    from countlens.llm.patching.experiment import PatchingConfig, plan_patching, run_patching

    config = PatchingConfig(prompts=prompt_settings(args), sources=[args.source], targets=[args.count],
                            answer_tokens=args.answer_tokens)
    pool = ModelPool()
    loaded = pool.loaded(config.model, progress=False)
    number_continuations(loaded.tokenizer)  # a definition, made once per tokenizer (as ``stops``)
    result, *ours = timed(lambda: run_patching(config, loaded=loaded, pool=pool))
    [(src, tgt)] = plan_patching(config).pairs
    locations = [loc["index"] for loc in result.locations]
    ld = np.array([r["ld_patched"] for r in result.rows])
    s_tok, t_tok = one_token_answers_of(loaded.tokenizer, [src.n, tgt.n], config.prompts.template)
    theirs, *nn_s = timed(nnsight_boundary_patching, fresh_model().model, src.ids, tgt.ids, locations, s_tok, t_tok,
                          stops)
    worst = float(np.abs(theirs - ld).max())
    print(f"(d) Figure 9a: count {tgt.n} patched from {src.n} ({tgt.n_tokens} tokens) at {len(locations)} locations "
          f"= {len(locations)} cells, answer tokens {args.answer_tokens}; LD target {result.rows[0]['ld_target']:.3f}, "
          f"source {result.rows[0]['ld_source']:.3f} nats")
    print(f"    largest |countlens − nnsight| {worst:.2e} nats (largest |LD − LD target| "
          f"{float(np.abs(ld - result.rows[0]['ld_target']).max()):.3f})")
    print(f"    countlens run_patching {seconds(*ours)}")
    print(f"    nnsight, a trace per cell and candidate: {seconds(*nn_s)}: {ratio(nn_s, ours)}")
    record("nnsight_boundary_patching", what=f"Figure 9a's boundary patching, {len(locations)} cells, one pair",
           countlens=f"`run_patching` (answer tokens {args.answer_tokens}), {ours[1]:.1f} s CPU "
                     f"({ours[0]:.1f} s wall)",
           baseline=f"nnsight, a `trace` per cell and candidate ({nn_s[1]:.1f} s CPU, {nn_s[0]:.1f} s wall)",
           ratio=f"{nn_s[1] / ours[1]:.1f}×",
           command="OMP_NUM_THREADS=1 python bench/bench_libraries.py --parts patching",
           note=f"by CPU time, the whole `run_patching` call in a run's model pool (its plan, source pass, clean run, "
                f"every candidate {tgt.n}..{src.n}, the greedy answer); final-answer LD equal cell by cell "
                f"({worst:.1e} nats)")
    if worst > TOLERANCE:
        sys.exit(f"FAILED: a cell differs by {worst:.2e} nats (tolerance {TOLERANCE:.0e})")


# ------------------------------------------------------------------------------------ (c) memory


def rss_peak(fn, interval: float = 0.0005) -> tuple[float, object]:
    """``(peak resident memory above the level at the start, in MiB; fn())``: the process's RSS sampled every
    ``interval`` seconds in a thread while ``fn`` runs (torch's CPU tensors are not Python allocations, so
    tracemalloc does not see them; large tensors are mapped and unmapped whole, so RSS follows them)."""
    import gc
    import threading

    import psutil

    gc.collect()
    proc = psutil.Process()
    start = proc.memory_info().rss
    peak = [start]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(interval)
    thread = threading.Thread(target=sample)
    thread.start()
    try:
        value = fn()
    finally:
        done.set()
        thread.join()
    return (max(peak[0], proc.memory_info().rss) - start) / 2 ** 20, value


def memory(loaded, modes=("shared", "copied"), tokens: int = 200, cells: int = 64) -> dict:
    """Peak memory (MiB above the start) of one boundary step of ``cells`` rows (and of one row) from the
    prefix cache of a ~``tokens``-token prompt, with the rows sharing the cache (countlens now) and with a copy
    of the cache per row (before: ``select_cache_rows``); the prefix pass itself is outside the measure."""
    from types import SimpleNamespace

    from countlens.llm import boundary
    from countlens.llm.answers import select_cache_rows
    from countlens.llm.capture.residuals import pad_token_id
    from countlens.llm.prompts import build_prompts

    model, tok = loaded.model, loaded.tokenizer
    base = build_prompts(tok, PromptSettings(L=12, counts=[5], pairs=[["a", "b"]], configs=["count"], seeds=[0]))[0]
    head = base.ids[:base.first_item_index]
    ids = list(head) + list(base.ids[base.first_item_index:-1]) * 64
    ids = ids[:tokens - 1] + [base.ids[-1]]
    prompt = SimpleNamespace(ids=ids, n_tokens=len(ids), boundary_index=len(ids) - 1)
    cands = candidate_token_ids(tok, [4, 5], "chat")
    out = {"tokens": len(ids)}
    shared = boundary.shared_cache_rows
    with torch.inference_mode():
        batch = boundary.PrefixBatch(model, [prompt], pad_token_id(tok))
        ways = {"copied": lambda cache, rows, model=None: select_cache_rows(cache, rows), "shared": shared}
        for mode, fn in ((m, ways[m]) for m in modes):
            boundary.shared_cache_rows = fn
            try:
                for r in (1, cells):
                    batch.step([0] * r, [cands] * r)  # warm
                    peak, _ = rss_peak(lambda r=r: batch.step([0] * r, [cands] * r))
                    out[(mode, r)] = peak
            finally:
                boundary.shared_cache_rows = shared
    layers = batch.cache.layers
    out["prefix_mib"] = sum(x.keys.numel() * x.keys.element_size() + x.values.numel() * x.values.element_size()
                            for x in layers) / 2 ** 20
    return out


def memory_apart(cells: int = 64) -> dict:
    """:func:`memory` of each mode in a fresh process of its own, glibc's mmap threshold fixed at 128 KiB (so
    every large tensor is mapped and unmapped whole, and one mode's freed memory cannot hide the next's)."""
    import json
    import subprocess

    out: dict = {}
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "OMP_NUM_THREADS": "1"}
    for mode in ("shared", "copied"):
        text = subprocess.run([sys.executable, __file__, "--memory-mode", mode], env=env, check=True,
                              capture_output=True, text=True).stdout
        got = json.loads(text.strip().splitlines()[-1])
        out.update({(mode, int(r)): v for r, v in got["peaks"].items()}, tokens=got["tokens"],
                   prefix_mib=got["prefix_mib"])
    return out


def print_memory(m: dict, cells: int = 64) -> None:
    print(f"(c) memory of one boundary step from a {m['tokens']}-token prompt's cache ({m['prefix_mib']:.1f} MiB "
          f"of keys and values): peak RSS above the start, 1 cell / {cells} cells")
    for mode in ("copied", "shared"):
        print(f"    rows {mode:7s}: {m[(mode, 1)]:.1f} MiB / {m[(mode, cells)]:.1f} MiB")


# ------------------------------------------------------------------------------------ the run


def record(key: str, **row) -> None:
    """Write one row of BENCHMARKS.md's table (bench/record.py; ``python bench/table.py`` renders it)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from record import write_row

    write_row("bench_libraries", key, **row)


def timed(fn, *args):
    """``(fn(*args), wall seconds, CPU seconds of this process)``: on a shared machine the CPU time moves less."""
    start, cpu = time.perf_counter(), time.process_time()
    value = fn(*args)
    return value, time.perf_counter() - start, time.process_time() - cpu


def seconds(wall: float, cpu: float) -> str:
    return f"{wall:.1f} s wall / {cpu:.1f} s CPU"


def ratio(theirs: tuple[float, float], ours: tuple[float, float]) -> str:
    return f"{theirs[0] / ours[0]:.2f}x countlens by wall time, {theirs[1] / ours[1]:.2f}x by CPU time"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--L", type=int, default=12, help="most items per prompt (default: 12)")
    ap.add_argument("--count", type=int, default=5, help="the clean prompt's count, one digit (default: 5)")
    ap.add_argument("--flip", default="first", choices=("first", "middle", "last"),
                    help="which target the twin turns into the distractor (default: first)")
    ap.add_argument("--location-step", type=int, default=2,
                    help="Figure 11 patches every this-many-th location and the last (default: 2)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="comma-separated parts to run: positions (a), components (b), patching (d) "
                         "(default: positions,components,patching)")
    ap.add_argument("--source", type=int, default=6,
                    help="(d) Figure 9a's source count, patched into the --count prompt, one digit; next to it, "
                         "countlens's candidates (every count between the two) are the two answers the reference "
                         "scores (default: 6)")
    ap.add_argument("--answer-tokens", type=int, default=1,
                    help="(d) greedy answer tokens run_patching decodes per cell (the nnsight loop decodes none; "
                         "default: 1)")
    ap.add_argument("--memory-only", action="store_true",
                    help="measure (c), the boundary step's peak memory, alone (no nnsight needed; default: off)")
    ap.add_argument("--memory-mode", choices=("shared", "copied"), default=None,
                    help="internal: measure one way of giving the rows their cache, print JSON (default: none)")
    args = ap.parse_args()
    if args.memory_mode:
        import json

        quiet_transformers()
        m = memory(fresh_model(), modes=(args.memory_mode,))
        print(json.dumps({"tokens": m["tokens"], "prefix_mib": m["prefix_mib"],
                          "peaks": {k[1]: v for k, v in m.items() if isinstance(k, tuple)}}))
        return
    if args.memory_only:
        m = memory_apart()
        print_memory(m)
        record("boundary_memory", what=f"one boundary step of 64 cells from a {m['tokens']}-token prompt's cache",
               countlens=f"rows share the cache: {m[('shared', 64)]:.0f} MiB peak (1 cell {m[('shared', 1)]:.0f} MiB)",
               baseline=f"a cache copy per row: {m[('copied', 64)]:.0f} MiB (1 cell {m[('copied', 1)]:.0f} MiB)",
               ratio=f"{m[('copied', 64)] / max(m[('shared', 64)], 1e-9):.1f}×",
               command="python bench/bench_libraries.py --memory-only",
               note="peak RSS above the start, sampled every 0.5 ms, one process per way")
        return
    try:
        import nnsight  # noqa: F401
        import transformer_lens  # noqa: F401
    except ImportError as exc:
        print(f"skipped: {exc.name} is not installed (pip install -e '.[bench]')")
        return
    quiet_transformers()
    print(f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores; torch threads "
          f"{torch.get_num_threads()}", flush=True)
    loaded = fresh_model()
    stops = torch.as_tensor(number_continuations(loaded.tokenizer))  # a definition: made outside every timed call
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        sys.exit(f"--parts: choose among {', '.join(PARTS)}")
    if "patching" in parts:  # countlens first in each part, on the model no library has wrapped
        boundary_patching(args, stops)
    if "positions" in parts:
        positions_part(args, loaded, stops)
    if "components" in parts:
        components_part(args, loaded, stops)
    print(f"load average at end {os.getloadavg()[0]:.2f} (1 min)")
    print(f"every cell agrees within {TOLERANCE:.0e} nats")


PARTS = ("positions", "components", "patching")


def positions_part(args, loaded, stops) -> None:
    """(a): ``run_position_patching`` against nnsight and TransformerLens; prints, records ``position_patching``,
    exits 1 where a cell differs by more than ``TOLERANCE``."""
    tok = loaded.tokenizer
    fig = PositionPatchingConfig(prompts=prompt_settings(args), location_step=args.location_step, flip=args.flip)
    result, *ours_a = timed(lambda: run_position_patching(fig, loaded=loaded))
    pair = prompt_pairs(tok, fig)[0]
    row = result.pairs[0]
    locations, positions = [loc["index"] for loc in result.locations], row.positions
    ld_a = np.array(row.ld)
    n_tok, m_tok = one_token_answers(tok, pair.clean.n, fig.prompts.template)
    nn_a, *nn_a_s = timed(nnsight_positions, fresh_model().model, pair, locations, positions, n_tok, m_tok, stops)
    bridge = bridge_of(fresh_model())  # booted outside the time, as bench_component_patching does
    n_blocks = len(loaded.model.model.layers)
    tl_a, *tl_a_s = timed(transformer_lens_positions, bridge, n_blocks, pair, locations, positions, n_tok, m_tok,
                          stops)
    cells_a = ld_a.size
    worst_a = {"nnsight": float(np.abs(nn_a - ld_a).max()), "TransformerLens": float(np.abs(tl_a - ld_a).max())}
    print(f"(a) Figure 11: count {pair.clean.n} vs its twin ({pair.clean.n_tokens} tokens, L={args.L}, flip "
          f"{fig.flip}), {len(locations)} locations (step {args.location_step}) x {len(positions)} positions = "
          f"{cells_a} cells; LD clean {row.ld_clean:.3f}, corrupted {row.ld_corrupt:.3f} nats")
    print(f"    largest |countlens − nnsight| {worst_a['nnsight']:.2e} nats, |countlens − TransformerLens| "
          f"{worst_a['TransformerLens']:.2e} nats (largest |LD − LD corrupted| "
          f"{float(np.abs(ld_a - row.ld_corrupt).max()):.3f})")
    print(f"    countlens run_position_patching {seconds(*ours_a)} ({result.runs} patched runs of {cells_a} cells)")
    print(f"    nnsight, a trace per cell and candidate: {seconds(*nn_a_s)}: {ratio(nn_a_s, ours_a)}")
    print(f"    TransformerLens generic_activation_patch, a call per candidate: {seconds(*tl_a_s)}: "
          f"{ratio(tl_a_s, ours_a)}")
    record("position_patching", what=f"Figure 11's patching, {cells_a} cells, one pair",
           countlens=f"`run_position_patching`, {ours_a[1]:.1f} s CPU",
           baseline=f"nnsight, a `trace` per cell and candidate ({nn_a_s[1]:.1f} s CPU); TransformerLens "
                    f"`generic_activation_patch` ({tl_a_s[1]:.1f} s CPU)",
           ratio=f"{nn_a_s[1] / ours_a[1]:.1f}× / {tl_a_s[1] / ours_a[1]:.1f}×",
           command="OMP_NUM_THREADS=1 python bench/bench_libraries.py",
           note=f"by CPU time; final-answer LD equal cell by cell ({max(worst_a.values()):.1e} nats)")
    if max(worst_a.values()) > TOLERANCE:
        sys.exit(f"FAILED: a cell differs by {max(worst_a.values()):.2e} nats (tolerance {TOLERANCE:.0e})")


def components_part(args, loaded, stops) -> None:
    """(b): ``run_components --source twin --scope boundary`` against nnsight; prints, records
    ``nnsight_components``, exits 1 where a cell differs by more than ``TOLERANCE``."""
    tok = loaded.tokenizer
    comp = ComponentsConfig(model=ModelSpec(), prompts=prompt_settings(args), ablate_prompts=1, source="twin",
                            scope="boundary", batch_size=8, flip=args.flip)
    plan = plan_components(comp)
    clean, twin = plan.prompts[plan.ablated[0]], plan.twins[0]
    n_tok, m_tok = one_token_answers(tok, clean.n, comp.prompts.template)
    comp_result, *ours_b = timed(lambda: run_components(comp, loaded=loaded))
    # the same call without the ablation: its DLA pass and greedy answers, so the patching alone is the difference
    _, *dla = timed(lambda: run_components(comp.with_options(ablate_prompts=0), loaded=loaded))
    ld_b = {(a["layer"], a["kind"], a["head"]): a["ld_change_mean"] for a in comp_result.ablation}
    nn_b, *nn_b_s = timed(nnsight_components, fresh_model().model, clean.ids, twin.ids, n_tok, m_tok, plan.n_heads,
                          stops)
    keys = sorted(ld_b, key=str)
    worst_b = max(abs(ld_b[k] - nn_b[k]) for k in keys)
    alone = (ours_b[0] - dla[0], ours_b[1] - dla[1])
    print(f"(b) components: {len(keys)} cells (attention and MLP writes and heads of {plan.n_blocks} blocks at the "
          f"boundary), count {clean.n} vs its twin")
    print(f"    largest |countlens − nnsight| of the LD change {worst_b:.2e} nats (largest change "
          f"{max(abs(v) for v in ld_b.values()):.3f}); the same top cell: "
          f"{max(keys, key=lambda k: abs(ld_b[k])) == max(keys, key=lambda k: abs(nn_b[k]))}")
    print(f"    countlens run_components (DLA, answers and the patching) {seconds(*ours_b)}; its patching alone "
          f"{seconds(*alone)} (less the same call without the ablation, {seconds(*dla)})")
    print(f"    nnsight, a trace per cell and candidate: {seconds(*nn_b_s)}: {ratio(nn_b_s, ours_b)}; against the "
          f"patching alone {ratio(nn_b_s, alone)}")
    record("nnsight_components", what=f"component patching, {len(keys)} cells, one pair",
           countlens=f"{ours_b[1]:.1f} s CPU ({ours_b[0]:.1f} s wall; patching alone {alone[1]:.1f} s CPU)",
           baseline=f"a plain nnsight loop of a `trace` per cell and candidate ({nn_b_s[1]:.1f} s CPU)",
           ratio=f"{nn_b_s[1] / ours_b[1]:.2f}×", command="OMP_NUM_THREADS=1 python bench/bench_libraries.py",
           note=f"by CPU time, the whole `run_components` call; final-answer LD change equal cell by cell "
                f"({worst_b:.1e} nats)")
    if worst_b > TOLERANCE:
        sys.exit(f"FAILED: a cell differs by {worst_b:.2e} nats (tolerance {TOLERANCE:.0e})")

if __name__ == "__main__":
    main()
