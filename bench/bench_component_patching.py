"""Component patching (issue 31) against TransformerLens's ``patching`` module, on the embedded
SmolLM2-135M-Instruct: every block's attention and MLP write and every head at the boundary replaced by the corrupted twin's
(``countlens llm components --source twin --scope boundary``) against ``transformer_lens.patching``'s
``get_act_patch_attn_out`` / ``get_act_patch_mlp_out`` / ``get_act_patch_attn_head_out_by_pos`` (their ``generic_activation_patch`` with their setter, the
cells given as an ``index_df``) on a ``TransformerBridge`` over the same loaded model
(its "clean" run is countlens's twin, its "corrupted" run countlens's prompt, the cells restricted to the
boundary position), the same cells in one run: the largest difference of the patched logit difference
(log p("n") − log p("n − 1"), one-token answers) and the time of each.

    OMP_NUM_THREADS=1 python bench/bench_component_patching.py [--count 6] [--L 12]

countlens's time is the whole ``run_components`` call (its DLA pass and greedy answers included), so the ratio
is conservative for countlens. TransformerLens is a bench extra here, never a runtime dependency.
"""

import argparse
import time

import numpy as np
import torch

from countlens.llm.components.experiment import ComponentsConfig, plan_components, run_components
from countlens.llm.models import ModelSpec, load_model, quiet_transformers
from countlens.llm.prompts import PromptSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=6, help="the clean prompt's count (one digit: one answer token)")
    ap.add_argument("--L", type=int, default=12)
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
    start = time.perf_counter()
    result = run_components(config, loaded=loaded)
    ours_s = time.perf_counter() - start
    ours = {(a["layer"], a["kind"], a["head"]): a["ld_change_mean"] for a in result.ablation}

    from transformer_lens import patching
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(loaded.location or loaded.model_id, hf_model=loaded.model,
                                                 tokenizer=tok, device="cpu", dtype=loaded.model.dtype)
    n_tok = tok(str(args.count), add_special_tokens=False)["input_ids"]
    m_tok = tok(str(args.count - 1), add_special_tokens=False)["input_ids"]
    assert len(n_tok) == len(m_tok) == 1, "one-digit counts: one answer token each"

    def metric(logits):
        lp = torch.log_softmax(logits[0, -1].double(), dim=-1)
        return lp[n_tok[0]] - lp[m_tok[0]]

    import pandas as pd

    base = torch.tensor([clean.ids])
    source = torch.tensor([twin.ids])
    start = time.perf_counter()
    with torch.no_grad():
        _, cache = bridge.run_with_cache(source)
        ld_base = float(metric(bridge(base)))
        index = pd.DataFrame({"layer": range(plan.n_blocks), "pos": [len(clean.ids) - 1] * plan.n_blocks})
        theirs = {}
        for kind, name in (("attn", "attn_out"), ("mlp", "mlp_out")):
            # get_act_patch_attn_out / _mlp_out restricted to the boundary position (their own setter and names)
            values = patching.generic_activation_patch(bridge, base, cache, metric,
                                                       patch_setter=patching.layer_pos_patch_setter,
                                                       activation_name=name, index_df=index)
            for layer, v in enumerate(values.tolist()):
                theirs[(layer, kind, None)] = v - ld_base
        # get_act_patch_attn_head_out_by_pos restricted to the boundary position: every head's z there
        H = plan.n_heads
        heads = pd.DataFrame({"layer": np.repeat(np.arange(plan.n_blocks), H),
                              "pos": [len(clean.ids) - 1] * (plan.n_blocks * H),
                              "head": np.tile(np.arange(H), plan.n_blocks)})
        values = patching.generic_activation_patch(bridge, base, cache, metric,
                                                   patch_setter=patching.layer_pos_head_vector_patch_setter,
                                                   activation_name="z", index_df=heads)
        for (layer, _, head), v in zip(heads.itertuples(index=False), values.tolist(), strict=True):
            theirs[(int(layer), "head", int(head))] = v - ld_base
    theirs_s = time.perf_counter() - start
    diff = max(abs(ours[k] - theirs[k]) for k in theirs)
    scale = max(abs(v) for v in theirs.values())
    print(f"{len(theirs)} cells (attention and MLP writes and heads of {plan.n_blocks} blocks at the boundary), count "
          f"{args.count} vs its twin, {len(clean.ids)} tokens")
    print(f"largest |countlens − TransformerLens| of the patched LD change: {diff:.2e} nats "
          f"(largest change {scale:.3f} nats); the same top cell: "
          f"{max(ours, key=lambda k: abs(ours[k])) == max(theirs, key=lambda k: abs(theirs[k]))}")
    print(f"countlens run_components (DLA, answers and the patching): {ours_s:.1f} s; TransformerLens patching "
          f"(cache, base run and the cells): {theirs_s:.1f} s; ratio {theirs_s / ours_s:.2f}x")
    print(f"pairs agree cell by cell: {bool(np.isclose([ours[k] for k in theirs], list(theirs.values()), atol=2e-3).all())}")


if __name__ == "__main__":
    main()
