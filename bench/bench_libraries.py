"""Figure 11's patching and the component patching (issue 31) against the libraries a user would otherwise pick,
on the embedded SmolLM2-135M-Instruct: the same cells written with nnsight (a plain loop, one ``trace`` per cell)
and with TransformerLens's ``patching`` module, against countlens's own experiment calls; equal cell by cell (the
largest difference of the patched logit difference LD = log p("n") − log p("n − 1"), one-token answers), and the
time of each.

    OMP_NUM_THREADS=1 python bench/bench_libraries.py [--L 12] [--count 5] [--flip first] [--location-step 2]

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

from countlens.llm.answers import candidate_token_ids
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
    """The answer tokens of ``n`` and ``n − 1`` (one token each, so LD is one pair of last-position logits)."""
    n_tok, m_tok = candidate_token_ids(tok, [n, n - 1], template)
    if len(n_tok) != 1 or len(m_tok) != 1:
        sys.exit(f"the answers {n} and {n - 1} are not one token each; choose a one-digit --count")
    return n_tok[0], m_tok[0]


def logit_difference(logits, n_tok: int, m_tok: int) -> float:
    """log p(n) − log p(n − 1) in nats from the last position's logits (V,)."""
    lp = torch.log_softmax(logits.double(), dim=-1)
    return float(lp[n_tok] - lp[m_tok])


def fresh_model():
    return load_model("default", progress=False)


# ------------------------------------------------------------------------------------ (a) Figure 11


def nnsight_positions(model, pair, locations, positions, n_tok, m_tok) -> np.ndarray:
    """(locations, positions) LD of the corrupted run with the clean residual written at each cell, one trace each."""
    from nnsight import NNsight

    nm = NNsight(model)

    def site(loc):  # location 0: the embeddings (block 0's input); l >= 1: block l - 1's output
        return nm.model.embed_tokens if loc == 0 else nm.model.layers[loc - 1]

    clean, corrupt = torch.tensor([pair.clean.ids]), torch.tensor([pair.corrupt.ids])
    out = np.zeros((len(locations), len(positions)))
    with torch.no_grad():
        saved = []  # made outside the trace: nnsight hands back only what is saved or mutated in it
        with nm.trace(clean):
            for loc in locations:
                saved.append(site(loc).output.clone().save())
        for j, loc in enumerate(locations):
            for k, p in enumerate(positions):
                with nm.trace(corrupt):
                    site(loc).output[:, p] = saved[j][:, p]
                    logits = nm.output.logits[0, -1].save()
                out[j, k] = logit_difference(logits, n_tok, m_tok)
    return out


def bridge_of(loaded):
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(loaded.location or loaded.model_id, hf_model=loaded.model,
                                               tokenizer=loaded.tokenizer, device="cpu", dtype=loaded.model.dtype)


def transformer_lens_positions(bridge, N, pair, locations, positions, n_tok, m_tok) -> np.ndarray:
    """The same cells through ``generic_activation_patch`` (``layer_pos_patch_setter``, the cells as an
    ``index_df``) on ``bridge`` (N blocks): location l < N is ``blocks.{l}.hook_resid_pre``, location N
    ``blocks.{N-1}.hook_resid_post``. The clean run's cache is made here, as a user's code would."""
    import pandas as pd
    from transformer_lens import patching

    clean, corrupt = torch.tensor([pair.clean.ids]), torch.tensor([pair.corrupt.ids])

    def metric(logits):
        return torch.tensor(logit_difference(logits[0, -1], n_tok, m_tok))

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
            with contextlib.redirect_stderr(io.StringIO()):  # its progress bar, one line per cell
                values = patching.generic_activation_patch(bridge, corrupt, cache, metric,
                                                           patch_setter=patching.layer_pos_patch_setter,
                                                           activation_name=name, index_df=index)
            out[rows] = values.double().numpy().reshape(len(rows), len(positions))
    return out


# ------------------------------------------------------------------------------------ (b) components


def nnsight_components(model, clean_ids, twin_ids, n_tok, m_tok, n_heads) -> dict:
    """{(layer, kind, head): LD change} of the clean run with one of the twin's boundary writes (``attn``, ``mlp``)
    or one head's slice of the output projection's input (``head``) written in, one trace each."""
    from nnsight import NNsight

    nm = NNsight(model)
    layers = nm.model.layers
    hd = model.config.hidden_size // n_heads
    clean, twin = torch.tensor([clean_ids]), torch.tensor([twin_ids])

    def patched(write) -> float:
        with nm.trace(clean):
            write()
            logits = nm.output.logits[0, -1].save()
        return logit_difference(logits, n_tok, m_tok)

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
                layer.self_attn.output[0][:, -1] = attn[b]

            def mlp_write(b=b, layer=layer):
                layer.mlp.output[:, -1] = mlp[b]
            out[(b, "attn", None)] = patched(attn_write) - base
            out[(b, "mlp", None)] = patched(mlp_write) - base
            for h in range(n_heads):
                def head_write(b=b, layer=layer, h=h):
                    layer.self_attn.o_proj.input[:, -1, h * hd:(h + 1) * hd] = z[b][:, h * hd:(h + 1) * hd]
                out[(b, "head", h)] = patched(head_write) - base
    return out


# ------------------------------------------------------------------------------------ the run


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
    args = ap.parse_args()
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
    tok = loaded.tokenizer

    # countlens first, on the model no library has wrapped
    fig = PositionPatchingConfig(prompts=prompt_settings(args), location_step=args.location_step, flip=args.flip)
    result, *ours_a = timed(lambda: run_position_patching(fig, loaded=loaded))
    pair = prompt_pairs(tok, fig)[0]
    row = result.pairs[0]
    locations, positions = [loc["index"] for loc in result.locations], row.positions
    ld_a = np.array(row.ld)
    n_tok, m_tok = one_token_answers(tok, pair.clean.n, fig.prompts.template)

    comp = ComponentsConfig(model=ModelSpec(), prompts=prompt_settings(args), ablate_prompts=1, source="twin",
                            scope="boundary", batch_size=8, flip=args.flip)
    plan = plan_components(comp)
    clean, twin = plan.prompts[plan.ablated[0]], plan.twins[0]
    comp_result, *ours_b = timed(lambda: run_components(comp, loaded=loaded))
    # the same call without the ablation: its DLA pass and greedy answers, so the patching alone is the difference
    _, *dla = timed(lambda: run_components(comp.with_options(ablate_prompts=0), loaded=loaded))
    ld_b = {(a["layer"], a["kind"], a["head"]): a["ld_change_mean"] for a in comp_result.ablation}

    nn_a, *nn_a_s = timed(nnsight_positions, fresh_model().model, pair, locations, positions, n_tok, m_tok)
    nn_b, *nn_b_s = timed(nnsight_components, fresh_model().model, clean.ids, twin.ids, n_tok, m_tok, plan.n_heads)
    bridge = bridge_of(fresh_model())  # booted outside the time, as bench_component_patching does
    tl_a, *tl_a_s = timed(transformer_lens_positions, bridge, plan.n_blocks, pair, locations, positions, n_tok, m_tok)

    cells_a = ld_a.size
    worst_a = {"nnsight": float(np.abs(nn_a - ld_a).max()), "TransformerLens": float(np.abs(tl_a - ld_a).max())}
    keys = sorted(ld_b, key=str)
    worst_b = max(abs(ld_b[k] - nn_b[k]) for k in keys)
    alone = (ours_b[0] - dla[0], ours_b[1] - dla[1])
    print(f"(a) Figure 11: count {pair.clean.n} vs its twin ({pair.clean.n_tokens} tokens, L={args.L}, flip "
          f"{fig.flip}), {len(locations)} locations (step {args.location_step}) x {len(positions)} positions = "
          f"{cells_a} cells; LD clean {row.ld_clean:.3f}, corrupted {row.ld_corrupt:.3f} nats")
    print(f"    largest |countlens − nnsight| {worst_a['nnsight']:.2e} nats, |countlens − TransformerLens| "
          f"{worst_a['TransformerLens']:.2e} nats (largest |LD − LD corrupted| "
          f"{float(np.abs(ld_a - row.ld_corrupt).max()):.3f})")
    print(f"    countlens run_position_patching {seconds(*ours_a)} ({result.runs} patched runs of {cells_a} cells)")
    print(f"    nnsight, a trace per cell: {seconds(*nn_a_s)}: {ratio(nn_a_s, ours_a)}")
    print(f"    TransformerLens generic_activation_patch: {seconds(*tl_a_s)}: {ratio(tl_a_s, ours_a)}")
    print(f"(b) components: {len(keys)} cells (attention and MLP writes and heads of {plan.n_blocks} blocks at the "
          f"boundary), count {clean.n} vs its twin")
    print(f"    largest |countlens − nnsight| of the LD change {worst_b:.2e} nats (largest change "
          f"{max(abs(v) for v in ld_b.values()):.3f}); the same top cell: "
          f"{max(keys, key=lambda k: abs(ld_b[k])) == max(keys, key=lambda k: abs(nn_b[k]))}")
    print(f"    countlens run_components (DLA, answers and the patching) {seconds(*ours_b)}; its patching alone "
          f"{seconds(*alone)} (less the same call without the ablation, {seconds(*dla)})")
    print(f"    nnsight, a trace per cell: {seconds(*nn_b_s)}: {ratio(nn_b_s, ours_b)}; against the patching alone "
          f"{ratio(nn_b_s, alone)}")
    print(f"load average at end {os.getloadavg()[0]:.2f} (1 min)")
    worst = max(*worst_a.values(), worst_b)
    if worst > TOLERANCE:
        sys.exit(f"FAILED: a cell differs by {worst:.2e} nats (tolerance {TOLERANCE:.0e})")
    print(f"every cell agrees within {TOLERANCE:.0e} nats")


if __name__ == "__main__":
    main()
