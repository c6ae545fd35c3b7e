"""Component patching (issue 31) against TransformerLens's ``patching`` module, on the embedded
SmolLM2-135M-Instruct: every block's attention and MLP write and every head at the boundary replaced by the corrupted twin's
(``countlens llm components --source twin --scope boundary``) against ``transformer_lens.patching``'s
``get_act_patch_attn_out`` / ``get_act_patch_mlp_out`` / ``get_act_patch_attn_head_out_by_pos`` (their ``generic_activation_patch`` with their setter, the
cells given as an ``index_df``) on a ``TransformerBridge`` over the same loaded model
(its "clean" run is countlens's twin, its "corrupted" run countlens's prompt, the cells restricted to the
boundary position), the same cells in one run: the largest difference of the patched logit difference
LD = log P(n) − log P(n − 1) (one-token answers) and the time of each.

    OMP_NUM_THREADS=1 python bench/bench_component_patching.py [--count 6] [--L 12]

P is the final-answer probability of SPEC §3, as countlens scores it: ``log P(k) = log p(k | prompt) +
log(1 − Σ_{t continues a number} p(t | prompt, k))``. TransformerLens computes it as its user would: one
``generic_activation_patch`` call per candidate, its corrupted tokens the prompt followed by the candidate token (the
patch at the boundary, now position −2), its metric log p(candidate) at −2 plus the stop factor at −1, the
continuing tokens being ``countlens.llm.answers.number_continuations`` (a definition, not the mechanism compared).
So TransformerLens runs twice the forwards the plain next-token logit difference needs: that is the fair
comparison, because countlens computes the stop factor too.

countlens's time is the whole ``run_components`` call (its DLA pass and greedy answers included), so the ratio
is conservative for countlens. TransformerLens is a bench extra here, never a runtime dependency. A cell differing
by more than ``TOLERANCE`` nats exits 1.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch

from countlens.llm.answers import candidate_token_ids, number_continuations
from countlens.llm.components.experiment import ComponentsConfig, plan_components, run_components
from countlens.llm.models import ModelSpec, load_model, quiet_transformers
from countlens.llm.prompts import PromptSettings

TOLERANCE = 1e-3  # nats: float32 runs of the same cells agree to ~1e-5; a misplaced patch differs by far more


def final_logprob(logits, cand: int, stops) -> torch.Tensor:
    """log P(``cand`` is the final answer) in nats, a 0-d float64 tensor, from the logits (≥ 2, V) of the prompt
    followed by ``cand``: log p(cand) at the boundary (position −2) plus log(1 − Σ_{t ∈ stops} p(t)) at the last
    position (−1); ``stops`` (S,) int64: the tokens that continue a number (``number_continuations``)."""
    boundary = torch.log_softmax(logits[-2].double(), dim=-1)[cand]
    return boundary + torch.log1p(-torch.softmax(logits[-1].double(), dim=-1)[stops].sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=6,
                    help="the clean prompt's count (one digit: one answer token; default: 6)")
    ap.add_argument("--L", type=int, default=12, help="most items per prompt (default: 12)")
    args = ap.parse_args()
    quiet_transformers()
    loaded = load_model("default", progress=False)
    tok = loaded.tokenizer
    config = ComponentsConfig(model=ModelSpec(), prompts=PromptSettings(L=args.L, counts=[args.count], per_count=1,
                                                                        pairs=[["a", "b"]], configs=["count"],
                                                                        seeds=[0]),
                              ablate_prompts=1, source="twin", scope="boundary", batch_size=8)
    plan = plan_components(config)
    clean, twin = plan.prompts[plan.ablated[0]], plan.twins[0]
    print(f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores; torch threads "
          f"{torch.get_num_threads()}", flush=True)
    start, cpu = time.perf_counter(), time.process_time()
    result = run_components(config, loaded=loaded)
    ours_s, ours_cpu = time.perf_counter() - start, time.process_time() - cpu
    ours = {(a["layer"], a["kind"], a["head"]): a["ld_change_mean"] for a in result.ablation}

    from transformer_lens import patching
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(loaded.location or loaded.model_id, hf_model=loaded.model,
                                                 tokenizer=tok, device="cpu", dtype=loaded.model.dtype)
    n_tok, m_tok = candidate_token_ids(tok, [args.count, args.count - 1], config.prompts.template)
    if len(n_tok) != 1 or len(m_tok) != 1:
        sys.exit(f"the answers {args.count} and {args.count - 1} are not one token each; choose a one-digit --count")
    n_tok, m_tok = n_tok[0], m_tok[0]
    stops = torch.as_tensor(number_continuations(tok))  # a definition: made outside the timed part

    def metric_of(cand):
        return lambda logits: final_logprob(logits[0], cand, stops)

    import pandas as pd

    # the prompt followed by each candidate token: the boundary, where the patches go, is position −2
    base = {c: torch.tensor([list(clean.ids) + [c]]) for c in (n_tok, m_tok)}
    source = torch.tensor([twin.ids])
    boundary = len(clean.ids) - 1

    def patch(index, setter, name):
        """LD (nats) of every cell of ``index``: one generic_activation_patch call per candidate."""
        final = [patching.generic_activation_patch(bridge, base[c], cache, metric_of(c), patch_setter=setter,
                                                   activation_name=name, index_df=index) for c in (n_tok, m_tok)]
        return (final[0].double() - final[1].double()).tolist()

    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        _, cache = bridge.run_with_cache(source)
        ld_base = float(metric_of(n_tok)(bridge(base[n_tok])) - metric_of(m_tok)(bridge(base[m_tok])))
        index = pd.DataFrame({"layer": range(plan.n_blocks), "pos": [boundary] * plan.n_blocks})
        theirs = {}
        for kind, name in (("attn", "attn_out"), ("mlp", "mlp_out")):
            # get_act_patch_attn_out / _mlp_out restricted to the boundary position (their own setter and names)
            for layer, v in enumerate(patch(index, patching.layer_pos_patch_setter, name)):
                theirs[(layer, kind, None)] = v - ld_base
        # get_act_patch_attn_head_out_by_pos restricted to the boundary position: every head's z there
        H = plan.n_heads
        heads = pd.DataFrame({"layer": np.repeat(np.arange(plan.n_blocks), H),
                              "pos": [boundary] * (plan.n_blocks * H),
                              "head": np.tile(np.arange(H), plan.n_blocks)})
        values = patch(heads, patching.layer_pos_head_vector_patch_setter, "z")
        for (layer, _, head), v in zip(heads.itertuples(index=False), values, strict=True):
            theirs[(int(layer), "head", int(head))] = v - ld_base
    theirs_s, theirs_cpu = time.perf_counter() - start, time.process_time() - cpu
    diff = max(abs(ours[k] - theirs[k]) for k in theirs)
    scale = max(abs(v) for v in theirs.values())
    print(f"{len(theirs)} cells (attention and MLP writes and heads of {plan.n_blocks} blocks at the boundary), count "
          f"{args.count} vs its twin, {len(clean.ids)} tokens")
    print(f"largest |countlens − TransformerLens| of the patched LD change: {diff:.2e} nats "
          f"(largest change {scale:.3f} nats); the same top cell: "
          f"{max(ours, key=lambda k: abs(ours[k])) == max(theirs, key=lambda k: abs(theirs[k]))}")
    print(f"countlens run_components (DLA, answers and the patching): {ours_s:.1f} s wall / {ours_cpu:.1f} s CPU; "
          f"TransformerLens patching, a call per candidate (cache, base runs and the cells): {theirs_s:.1f} s wall / "
          f"{theirs_cpu:.1f} s CPU; ratio {theirs_s / ours_s:.2f}x by wall time, {theirs_cpu / ours_cpu:.2f}x by CPU "
          f"time")
    print(f"load average at end {os.getloadavg()[0]:.2f} (1 min)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from record import env_prefix, this_command, write_row

    write_row("bench_component_patching", "transformerlens", what=f"component patching, {len(theirs)} cells, one pair",
              countlens=f"`run_components`, {ours_cpu:.1f} s CPU ({ours_s:.1f} s wall)",
              baseline=f"TransformerLens `generic_activation_patch`, a call per candidate ({theirs_cpu:.1f} s CPU)",
              ratio=f"{theirs_cpu / ours_cpu:.2f}×", command=this_command(env_prefix()),
              note=f"by CPU time; final-answer LD change equal cell by cell ({diff:.1e} nats)")
    if diff > TOLERANCE:
        sys.exit(f"FAILED: a cell differs by {diff:.2e} nats (tolerance {TOLERANCE:.0e})")
    print(f"every cell agrees within {TOLERANCE:.0e} nats")


if __name__ == "__main__":
    main()
