"""Figure 12's head ablation on the embedded SmolLM2-135M-Instruct (30 blocks x 9 heads): the cached, batched
path (:func:`countlens.llm.heads.attention.ablated_scores`: one prompt pass per batch, then per block all heads x prompts
as one batch of single-token boundary steps) against the naive loop (one full forward per head and prompt) and
against batched full forwards (all heads x prompts of a block in one batch of full forwards), in one run, as
ratios, with the largest difference of the scores; then the attention-mass pass and the quick stage's size.

    python bench/bench_heads.py [--prompts 8] [--blocks 0,14,29] [--batch-size 8] [--stage]
"""

import argparse
import os
import time

import numpy as np
import torch

from countlens.llm.answers import candidate_logprobs, candidate_token_ids
from countlens.llm.capture.residuals import pad_token_id
from countlens.llm.heads.attention import HeadAblation, ablated_scores, head_masses
from countlens.llm.heads.experiment import HeadsConfig, plan_heads, run_heads
from countlens.llm.hooks import hook_sites
from countlens.llm.models import quiet_transformers


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def naive(model, tok, prompts, sites, means, H):
    """One full forward per (block, head, prompt), the edit a :class:`HeadAblation` at the boundary."""
    hd = means.shape[-1] // H
    out = np.zeros((len(prompts), len(sites), H, 2))
    for j, site in enumerate(sites):
        for h in range(H):
            value = torch.as_tensor(means[site.block]).view(H, hd)[h][None]
            for i, p in enumerate(prompts):
                def context(rows, index, site=site, h=h, value=value):
                    return HeadAblation(model, site, torch.tensor([h]), value, hd)
                out[i, j, h] = candidate_logprobs(model, tok, [p], [p.n, p.n - 1], batch_size=1, context=context)[0]
    return out


def batched_full(model, tok, prompts, sites, means, H):
    """Per block, all heads x prompts in one batch of full (left-padded) forwards."""
    hd = means.shape[-1] // H
    counts = sorted({k for p in prompts for k in (p.n, p.n - 1)})
    rows = [p for p in prompts for _ in range(H)]
    heads = torch.arange(H).repeat(len(prompts))
    out = np.zeros((len(prompts), len(sites), H, 2))
    for j, site in enumerate(sites):
        values = torch.as_tensor(means[site.block]).view(H, hd)[heads]

        def context(batch, index, site=site, values=values):
            return HeadAblation(model, site, heads[batch], values[batch], hd)
        scores = candidate_logprobs(model, tok, rows, counts, batch_size=len(rows), context=context)
        for r, p in enumerate(rows):
            out[r // H, j, r % H] = scores[r, [counts.index(p.n), counts.index(p.n - 1)]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="ablated prompts (default: 8)")
    parser.add_argument("--blocks", default="0,14,29", help="ablated blocks (default: 0,14,29)")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per batch of the cached path")
    parser.add_argument("--stage", action="store_true", help="also time the quick preset's stage (HeadsConfig())")
    args = parser.parse_args()
    quiet_transformers()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores, torch threads "
          f"{torch.get_num_threads()})")
    config = HeadsConfig(ablate_prompts=args.prompts)
    plan = plan_heads(config)
    loaded = config.model.load(False, tokenizer=plan.tokenizer)
    model, tok = loaded.model, loaded.tokenizer
    H, pad = plan.n_heads, pad_token_id(tok)
    prompts = [plan.prompts[i] for i in plan.ablated]
    cands = [candidate_token_ids(tok, [p.n, p.n - 1]) for p in prompts]
    blocks = [int(b) for b in args.blocks.split(",")]
    sites = hook_sites(blocks, plan.n_blocks, plan.site)
    with torch.inference_mode():
        (masses, means), t_mass = timed(lambda: head_masses(model, plan.prompts, plan.roles, plan.site, pad, 8))
        (fast, _), t_fast = timed(lambda: ablated_scores(model, prompts, cands, sites, means, H, pad,
                                                         args.batch_size))
        full, t_full = timed(lambda: batched_full(model, tok, prompts, sites, means, H))
        slow, t_slow = timed(lambda: naive(model, tok, prompts, sites, means, H))
    n = len(prompts) * len(blocks) * H
    print(f"attention masses: {len(plan.prompts)} prompts (L={config.prompts.L}), {t_mass:.2f} s "
          f"({len(plan.prompts) / t_mass:.1f} prompts/s, one eager forward each)")
    print(f"head ablation, {len(prompts)} prompts x {len(blocks)} blocks x {H} heads = {n} ablated runs:")
    print(f"  naive loop (one full forward per head and prompt): {t_slow:.2f} s")
    print(f"  batched full forwards (a block's heads x prompts per batch): {t_full:.2f} s")
    print(f"  cached boundary steps (countlens.llm.heads.attention.ablated_scores): {t_fast:.2f} s")
    print(f"  speed-up: {t_slow / t_fast:.1f}x over the naive loop, {t_full / t_fast:.1f}x over batched full "
          f"forwards; largest |difference| of log p: {np.abs(fast - slow).max():.2e} (naive), "
          f"{np.abs(fast - full).max():.2e} (batched full)")
    print(f"  per block of {len(prompts)} prompts x {H} heads: {t_fast / len(blocks):.2f} s cached "
          f"(so all {plan.n_blocks} blocks: about {t_fast / len(blocks) * plan.n_blocks:.0f} s)")
    if args.stage:
        result, t_stage = timed(lambda: run_heads(HeadsConfig(), loaded=loaded))
        print(f"quick stage HeadsConfig(): {len(result.prompts)} prompts, "
              f"{sum(p['ablated'] for p in result.prompts)} ablated in {len(result.layers)} blocks: {t_stage:.1f} s "
              "(model already loaded)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
