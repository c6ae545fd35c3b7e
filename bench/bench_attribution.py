"""Figure 15's cost on the embedded SmolLM2-135M-Instruct (``--model default``): attribution patching (AtP: one
forward and one backward per prompt pair) against activation patching of the same cells — the quick preset's
grid (Figure 11's residual cells at every other location, every block's attention and MLP write at each position
and at all positions at once, every head at the boundary and at all positions at once) — measured in one run
(:func:`countlens.llm.attribution.experiment.run_attribution`), with the agreement per group of cells and the
peak memory of AtP alone.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python3 bench/bench_attribution.py [--preset quick] [--model default] [--out F]

Peak memory: the process's peak resident set size (``resource.getrusage``) after loading the model and one
unpatched forward, then after AtP's gradient passes of every pair of the grid (nothing else run in between); the
difference is AtP's own peak above the loaded model. Run before the activation patching, which would raise the
peak first.
"""

import argparse
import resource
import time

import torch
from record import this_command, write_row  # bench/ is on sys.path when run as a script

from countlens.llm.answers import candidate_token_ids
from countlens.llm.attribution.atp import gradient_pass
from countlens.llm.attribution.experiment import GROUPS, plan_attribution, run_attribution
from countlens.llm.hooks import hook_sites
from countlens.llm.models import ModelSpec, load_model, quiet_transformers


def peak_mib() -> float:
    """The process's peak resident set size so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--preset", default="quick", choices=("quick", "test", "full"))
    parser.add_argument("--out", default=None, help="also save the result and draw Figure 15 in this folder")
    args = parser.parse_args()
    quiet_transformers()
    from countlens.core.registry import discover

    [experiment] = [e for e in discover("countlens.llm") if e.name == "attribution"]
    config = experiment.preset(args.preset).with_options(model=ModelSpec(args.model))
    plan = plan_attribution(config)
    loaded = load_model(args.model, progress=False)
    model, tok = loaded.model, loaded.tokenizer
    L = plan.n_blocks
    attn_out, mlp_out, attn_z = plan.sites
    sites = {"resid": hook_sites(plan.locations, L), "attn": hook_sites(plan.layers, L, attn_out),
             "mlp": hook_sites(plan.layers, L, mlp_out), "z": hook_sites(plan.layers, L, attn_z)}
    with torch.inference_mode():
        model(input_ids=torch.tensor([plan.pairs[0].clean.ids]))
    before = peak_mib()
    started = time.perf_counter()
    for pp in plan.pairs:
        cands = candidate_token_ids(tok, [pp.clean.n, pp.clean.n - 1], config.prompts.template)
        gradient_pass(model, pp.clean.ids, pp.corrupt.ids, cands, sites)
    atp_alone = time.perf_counter() - started
    after = peak_mib()
    result = run_attribution(config, loaded=loaded)
    cells = len(result.cells)
    print(f"model {result.model} ({result.n_layers} blocks x {result.n_heads} heads), preset {args.preset}: "
          f"{len(result.pairs)} pairs, {cells} cells, direction {result.direction}")
    print(f"AtP {result.atp_seconds:.3f} s (gradient passes alone, before: {atp_alone:.3f} s); activation patching "
          f"{result.act_seconds:.3f} s; speed ratio {result.speed_ratio:.1f}x")
    for group in GROUPS:
        a = result.agreement[group]
        rho = "n/a" if a["spearman"] is None else f"{a['spearman']:.3f}"
        overlap = "n/a" if a["top_k_overlap"] is None else f"{a['top_k_overlap']:.2f}"
        print(f"  {group:9s}: {a['cells']:5d} cells compared ({a['trivial']} trivial), Spearman rho {rho}, "
              f"top-{a['top_k']} overlap {overlap}, largest error {a['max_abs_error']:.3g} nats, activation patching "
              f"{a['act_seconds']:.2f} s = {a['speed_ratio']:.1f}x AtP's whole pass")
    if args.out:
        from countlens.llm.attribution.figures import draw_attribution

        result.save(args.out)
        draw_attribution(result, args.out)
    print(f"peak RSS: {before:.0f} MiB with the model loaded, {after:.0f} MiB after AtP's passes: AtP's own peak "
          f"<= {after - before:.0f} MiB above the loaded model")
    rhos = " / ".join("n/a" if result.agreement[g]["spearman"] is None else f"{result.agreement[g]['spearman']:.3g}"
                      for g in GROUPS)
    write_row("bench_attribution", "atp",
              what=f"attribution patching (Figure 15), {args.preset} grid, {cells:,} cells, model {args.model}",
              countlens=f"AtP, {result.atp_seconds:.2f} s",
              baseline=f"activation patching of every cell ({result.act_seconds:.1f} s)",
              ratio=f"{result.speed_ratio:.1f}×", note=f"Spearman ρ {rhos} ({' / '.join(GROUPS)})",
              command=this_command())


if __name__ == "__main__":
    main()
