"""The causal count subspace against the peer: countlens's DAS (:mod:`countlens.llm.das`) and pyvene 0.1.8's
``LowRankRotatedSpaceIntervention`` (component ``block_output``, unit ``pos``) on the same organism, the same
training and held-out pairs, the same rank, objective (cross-entropy of the source count's first answer token at
the base's boundary), optimiser (Adam), learning rate, steps and batch size: the held-out IIA of each and the time
each takes to learn and score, in one run.

pyvene is not a dependency of countlens (its pins are its own); it installs beside the project's torch and
transformers without its own dependencies, e.g. into a folder put on ``PYTHONPATH``:

    pip install --no-deps --target /tmp/pyvene-pkg pyvene==0.1.8
    PYTHONPATH=/tmp/pyvene-pkg python bench/bench_das.py [--organism DIR] [--rank 2] [--steps 60]

Without ``--organism`` the tiny organism of the tests (L = 3, one block, live head 0.1) is trained first (about a
minute on one thread) into ``--work``. The location is the output of the organism's last block, where the
construction makes the interchange decide the first answer token. pyvene runs each pair unpadded (batch 1, the
step's gradient accumulated over ``--batch-size`` pairs), countlens from its prefix caches; the pairs, their order
and the IIA definition are countlens's (:func:`countlens.llm.das.experiment.plan_das`).
"""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from record import env_prefix, this_command, write_row  # bench/ is on sys.path when run as a script

TINY = dict(L=3, layers=1, heads=2, width=16, live_heads=[[0, 1]], pairs=[["a", "b"]], configs=["count", "tally"],
            lr=1e-2, batch_size=16, max_steps=400, eval_every=20, softmax="full")


def organism_folder(work: Path) -> Path:
    from countlens.llm.organisms.experiment import OrganismConfig, run_organism

    folder = work / "organism"
    os.environ.setdefault("COUNTLENS_CACHE", str(work / "cache"))
    if not (folder / "model.safetensors").is_file():
        try:
            run_organism(OrganismConfig(**TINY), out=folder, reuse=True)
        except ValueError as exc:  # the held-out scoring after training; the weights are saved before it
            if not (folder / "model.safetensors").is_file():
                raise exc
    return folder


def countlens_das(plan, config, loaded, location: int, rank: int):
    """(IIA, seconds) of countlens's DAS at ``location``."""
    from countlens.llm.answers import number_continuations
    from countlens.llm.capture.residuals import pad_token_id
    from countlens.llm.das.experiment import _pair_set
    from countlens.llm.das.search import BoundarySteps, interchange_scores, learn_basis

    start = time.perf_counter()
    parts = []
    for pairs in (plan.train, plan.held_out):
        members = sorted({i for pair in pairs for i in pair})
        steps = BoundarySteps(loaded.model, [plan.prompts[i] for i in members], pad_token_id(loaded.tokenizer))
        pair_set = _pair_set(plan, pairs, members)
        x = steps.vectors([location])[:, 0]
        parts.append((steps, pair_set, x[pair_set.source] - x[pair_set.base]))
    (train, train_pairs, train_diffs), (test, test_pairs, test_diffs) = parts
    basis, _ = learn_basis(train, location, train_diffs, train_pairs, rank, config.steps, config.lr,
                           config.batch_size, config.seed)
    scores = interchange_scores(test, location, test_diffs, test_pairs, basis, plan.candidate_ids,
                                number_continuations(loaded.tokenizer), config.batch_size)
    return float(np.mean(scores.first == test_pairs.target)), time.perf_counter() - start


def pyvene_das(plan, config, model, block: int, rank: int):
    """(IIA, seconds) of pyvene's low-rank rotated-space intervention on ``block``'s output at the last position."""
    import pyvene as pv

    start = time.perf_counter()
    torch.manual_seed(config.seed)
    iv_config = pv.IntervenableConfig(representations=[{"layer": block, "component": "block_output", "unit": "pos",
                                                        "low_rank_dimension": rank}],
                                      intervention_types=pv.LowRankRotatedSpaceIntervention)
    intervenable = pv.IntervenableModel(iv_config, model)
    intervenable.disable_model_gradients()
    optimiser = torch.optim.Adam([p for p in intervenable.get_trainable_parameters()], lr=config.lr)
    first = {k: ids[0] for k, ids in zip(plan.candidates, plan.candidate_ids, strict=True)}

    def logits(b, s):
        base, source = plan.prompts[b], plan.prompts[s]
        _, out = intervenable({"input_ids": torch.tensor([base.ids])}, [{"input_ids": torch.tensor([source.ids])}],
                              {"sources->base": ([[[len(source.ids) - 1]]], [[[len(base.ids) - 1]]])})
        return out.logits[0, -1]

    rng = np.random.default_rng([config.seed, block + 1, rank])  # the epoch order of learn_basis
    order = np.array([], dtype=np.int64)
    for _ in range(config.steps):
        if len(order) < min(config.batch_size, len(plan.train)):
            order = np.concatenate([order, rng.permutation(len(plan.train))])
        batch, order = order[:config.batch_size], order[config.batch_size:]
        optimiser.zero_grad()
        for i in batch:
            b, s = plan.train[i]
            target = torch.tensor(first[plan.prompts[s].n])
            loss = torch.nn.functional.cross_entropy(logits(b, s)[None], target[None]) / len(batch)
            loss.backward()
        optimiser.step()
    with torch.no_grad():
        right = [int(logits(b, s).argmax()) == first[plan.prompts[s].n] for b, s in plan.held_out]
    return float(np.mean(right)), time.perf_counter() - start


def main():
    from countlens.core.threads import torch_threads
    from countlens.llm.das.experiment import DasConfig, plan_das
    from countlens.llm.models import ModelSpec, quiet_transformers
    from countlens.llm.prompts import PromptSettings

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--organism", default=None, help="an organism folder (default: train the tests' tiny one)")
    ap.add_argument("--work", default="/tmp/countlens-bench-das", help="where the tiny organism is trained")
    ap.add_argument("--rank", type=int, default=2, help="rank of the learned subspace")
    ap.add_argument("--steps", type=int, default=60, help="Adam steps of each")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args()
    quiet_transformers()
    folder = Path(args.organism) if args.organism else organism_folder(Path(args.work))
    prompts = PromptSettings(L=3, counts=[0, 1, 2, 3], per_count=2, pairs=[["a", "b"]], configs=["count", "tally"],
                             seeds=[0, 1, 2, 3])
    config = DasConfig(model=str(folder), prompts=prompts, ranks=[args.rank], steps=args.steps, random_model=False)
    plan = plan_das(config)
    location = plan.n_blocks  # the output of the last block
    with torch_threads(args.threads):
        loaded = ModelSpec(model=str(folder)).load(progress=False)
        ours, ours_s = countlens_das(plan, config, loaded, location, args.rank)
        theirs, theirs_s = pyvene_das(plan, config, loaded.model, location - 1, args.rank)
    print(f"organism {folder}: rank {args.rank}, {args.steps} steps, {len(plan.train)} training / "
          f"{len(plan.held_out)} held-out pairs, at the output of block {location - 1}")
    print(f"  countlens DAS: IIA {ours:.3f} in {ours_s:.1f} s")
    print(f"  pyvene LowRankRotatedSpaceIntervention: IIA {theirs:.3f} in {theirs_s:.1f} s")
    print(f"  |difference| {abs(ours - theirs):.3f} ({'within' if abs(ours - theirs) <= 0.02 else 'NOT within'} "
          f"0.02); time ratio pyvene / countlens {theirs_s / ours_s:.1f}")
    write_row("bench_das", "das",
              what=f"DAS, rank {args.rank}, {args.steps} Adam steps, {len(plan.train)} training / "
                   f"{len(plan.held_out)} held-out pairs, "
                   f"{'the tests’ tiny organism' if not args.organism else 'organism ' + folder.name}",
              countlens=f"IIA {ours:.3f} in {ours_s:.1f} s",
              baseline=f"pyvene `LowRankRotatedSpaceIntervention` (IIA {theirs:.3f}, {theirs_s:.1f} s)",
              ratio=f"{theirs_s / ours_s:.1f}×", note=f"the IIAs differ by {abs(ours - theirs):.3f} (target ≤ 0.02)",
              command=this_command(env_prefix(("PYTHONPATH",))))


if __name__ == "__main__":
    main()
