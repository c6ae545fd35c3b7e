"""Benchmark: boundary capture on the embedded SmolLM2 vs what a user would otherwise run.

Same prompts, same length-sorted right-padded batches, one process, methods interleaved round by round
(the median round is reported, so a noisy neighbour hurts every method alike):
  plain     ``model.base_model(...)`` with no hooks: the floor (target: capture >= 0.95 of its speed)
  capture   countlens ``BoundaryCapture``, all 31 locations, boundary rows only
  hidden    ``output_hidden_states=True``, then slicing the boundary rows (keeps every position of every layer)
  early-k   ``BoundaryCapture`` of locations 0..k only (early stop after block k-1)
  tl-cache  TransformerLens ``TransformerBridge.run_with_cache`` with a names filter (resid_pre 0 + every
            resid_post), then slicing; on a second copy of the model, which the bridge switches to eager
            attention, so ``capture-eager`` (our hooks on that copy) is its like-for-like comparison
Peak memory is the rise of the process's peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs``) over
the RSS before the method ran, with a fixed malloc mmap threshold so freed buffers go back to the OS.
Also reported: the end-to-end ``countlens.llm.run_capture`` (prompts -> Arrow folder) throughput.

``--answers`` measures instead what the answer as a distribution over counts costs: the capture with answers
(``answering_runner``) now — greedy answer, the correct answer's log-probability and every candidate count's
(0..100 at the quick preset's L = 256, all tokens teacher-forced from the prompt's own KV cache) — against the
runner before that change (a verbatim copy below, :func:`old_answering_runner`) and the capture without
answers, on the same batches, interleaved round by round; compute only (``capture_shard``), and the
extrapolation to the quick preset's 404 prompts.

    python bench/bench_capture.py                    # 48 prompts, L=64, 5 rounds
    python bench/bench_capture.py --prompts 96 --rounds 5 --json bench/out/capture.json
    python bench/bench_capture.py --answers --prompts 16 --L 256 --rounds 2
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

if "MALLOC_MMAP_THRESHOLD_" not in os.environ:  # must be set before the process starts
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})

import numpy as np  # noqa: E402
import torch  # noqa: E402
from record import this_command, write_row  # noqa: E402  (bench/ is on sys.path when run as a script)


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmHWM", "VmRSS")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024
    return out


def measure(fn) -> tuple[float, float]:
    """(seconds, peak RSS rise in MiB) of ``fn()``."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        before = _status()["VmRSS"]
    except OSError:
        before = None
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    peak = (_status()["VmHWM"] - before) / 2**20 if before is not None else float("nan")
    return seconds, peak


def old_answering_runner(loaded, locations, batch_size, answer_tokens=16, template="chat"):
    """``countlens.llm.answers.answering_runner`` as it was before the answer became a distribution (commit
    7acb7f7): the greedy answer and the correct answer's log-probability only."""
    from countlens.core.store import ANSWER_COLUMNS
    from countlens.llm.answers import answer_batch, answer_token_ids, parse_answer, stop_token_ids
    from countlens.llm.capture.residuals import (
        BoundaryCapture,
        ShardRunner,
        hidden_size,
        pad_batch,
        pad_token_id,
    )

    model, tokenizer = loaded.model, loaded.tokenizer
    hooks = BoundaryCapture(model, locations, early_stop=False)
    stop, pad_id = stop_token_ids(model, tokenizer), pad_token_id(tokenizer)
    device = model.get_input_embeddings().weight.device

    def run(group):
        ids, mask, index = pad_batch(group, pad_id, "left", device)
        hooks.expect(index)
        out = answer_batch(model, ids, mask, [answer_token_ids(tokenizer, p.n, template) for p in group], stop,
                           answer_tokens, pad_id, prompt_context=hooks)
        texts = out.texts(tokenizer)
        return hooks.result().numpy(), {"answer_text": texts, "answer": [parse_answer(t) for t in texts],
                                        "answer_logprob": out.logprob.tolist()}
    return ShardRunner(hooks.names, run, batch_size, hidden_size(model.config), ANSWER_COLUMNS)


def answers_main(args) -> None:
    """The ``--answers`` measurement (see the module docstring)."""
    from countlens.llm.answers import answer_candidates, answering_runner
    from countlens.llm.capture.residuals import capture_shard, length_sorted, shard_runner
    from countlens.llm.models import load_model, quiet_transformers
    from countlens.llm.prompts import PromptSettings, build_prompts

    quiet_transformers()
    loaded = load_model("default", progress=False)
    per_pair = max(2, args.prompts // 4)
    counts = sorted({int(round(c)) for c in np.linspace(0, min(100, args.L), per_pair)})  # 0 and 100 included
    prompts = length_sorted(build_prompts(loaded.tokenizer, PromptSettings(L=args.L, counts=counts, configs=["count"],
                                                                           seeds=[0])))
    candidates = answer_candidates(counts)
    runners = {"plain": shard_runner(loaded, None, "hf", "right", args.batch_size),
               "answers-before": old_answering_runner(loaded, None, args.batch_size),
               "answers-now": answering_runner(loaded, None, args.batch_size, candidates=candidates)}
    times: dict[str, list[float]] = {m: [] for m in runners}
    peaks: dict[str, list[float]] = {m: [] for m in runners}
    with torch.inference_mode():
        old, new = (capture_shard(runners[m], prompts) for m in ("answers-before", "answers-now"))
    assert np.array_equal(old["acts"], new["acts"]) and old["answer_text"] == new["answer_text"]
    drift = float(np.max(np.abs(np.subtract(old["answer_logprob"], new["answer_logprob"]))))
    for _ in range(args.rounds):
        for name, runner in runners.items():
            sec, peak = measure(lambda r=runner: capture_shard(r, prompts))
            times[name].append(sec)
            peaks[name].append(peak)
    med = {m: statistics.median(v) for m, v in times.items()}
    best = {m: min(v) for m, v in times.items()}
    load = os.getloadavg()[0]
    print(f"SmolLM2-135M-Instruct, {len(prompts)} prompts (L={args.L}, {prompts[-1].n_tokens} tokens at most), "
          f"batch {args.batch_size}, {len(candidates)} candidates {candidates[0]}..{candidates[-1]}, "
          f"{args.rounds} rounds, torch threads {torch.get_num_threads()}, load average {load:.2f}")
    print(f"{'method':<15} {'median s':>9} {'best s':>8} {'prompts/s':>10} {'peak MiB':>9}")
    for name in runners:
        print(f"{name:<15} {med[name]:9.2f} {best[name]:8.2f} {len(prompts) / med[name]:10.3f} "
              f"{max(peaks[name]):9.1f}")
    ratio = med["answers-now"] / med["answers-before"]
    print(f"capture with answers now / before: median {ratio:.3f}x, best "
          f"{best['answers-now'] / best['answers-before']:.3f}x (target <= 1.3); before / plain "
          f"{med['answers-before'] / med['plain']:.3f}x, now / plain {med['answers-now'] / med['plain']:.3f}x")
    before, now = (404 * med[m] / len(prompts) for m in ("answers-before", "answers-now"))
    print(f"extrapolated to the quick preset's 404 prompts: {before:.0f} s before, {now:.0f} s now "
          f"(+{now - before:.0f} s), compute only")
    print(f"same vectors and greedy answers; max |answer_logprob now - before| = {drift:.1e} nats")
    if args.json:
        from countlens.core.io import provenance, write_json_atomic

        write_json_atomic(args.json, {"prompts": len(prompts), "median_seconds": med, "best_seconds": best,
                                      "ratio": ratio,
                                      "peak_mib": {m: max(v) for m, v in peaks.items()}, "load_average": load,
                                      "provenance": provenance(vars(args))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=48, help="number of prompts (counts spread over 0..L)")
    parser.add_argument("--L", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--early", default="1,8,15", help="k values for the early-stop rows")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", default=None, help="write the measurements here")
    parser.add_argument("--answers", action="store_true", help="measure the capture with answers instead (the "
                                                               "answer as a distribution over counts vs before)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.answers:
        answers_main(args)
        return

    from transformers.utils import logging as hf_logging

    from countlens.llm import CaptureConfig, run_capture
    from countlens.llm.capture.residuals import (
        BoundaryCapture,
        batches,
        length_sorted,
        pad_batch,
        pad_token_id,
    )
    from countlens.llm.hooks import hook_sites
    from countlens.llm.models import load_model
    from countlens.llm.prompts import PromptSettings, build_prompts

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    loaded = load_model("default", progress=True)
    model, tok = loaded.model, loaded.tokenizer
    per_pair = max(1, args.prompts // 4)
    counts = sorted({int(round(c)) for c in np.linspace(0, args.L, per_pair)})
    settings = PromptSettings(L=args.L, counts=counts, configs=["count"], seeds=[0])
    prompts = length_sorted(build_prompts(tok, settings))
    n_tokens = sum(p.n_tokens for p in prompts)
    pad_id = pad_token_id(tok)
    groups = [pad_batch([prompts[i] for i in idx], pad_id) for idx in batches(prompts, args.batch_size)]
    n_blocks = model.config.num_hidden_layers
    early = [int(k) for k in args.early.split(",") if k.strip()]

    def plain():
        for ids, mask, _ in groups:
            model.base_model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                             use_cache=False)

    def ours(locations=None):
        def run():
            out = []
            with BoundaryCapture(model, locations) as cap:
                for ids, mask, index in groups:
                    out.append(cap.run(ids, mask, index))
            return out
        return run

    def hidden():
        out = []
        for ids, mask, index in groups:
            hs = model.base_model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                                  position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=False).hidden_states
            rows = torch.arange(ids.shape[0])
            out.append(torch.stack([h[rows, index] for h in hs], dim=1).float())
        return out

    # TransformerLens on its own copy of the model: booting the bridge switches that copy to eager attention,
    # so "capture-eager" (our hooks on the same eager copy) is the like-for-like comparison.
    from transformer_lens.model_bridge import TransformerBridge

    twin = load_model("default", progress=False)
    bridge = TransformerBridge.boot_transformers(twin.location,
                                                 hf_model=twin.model, tokenizer=tok, device="cpu")
    names = [site.tl_name for site in hook_sites(range(n_blocks + 1), n_blocks)]
    wanted = set(names)

    def tl_cache():
        out = []
        for ids, mask, index in groups:
            _, cache = bridge.run_with_cache(ids, attention_mask=mask, names_filter=lambda n: n in wanted,
                                             return_type=None)
            rows = torch.arange(ids.shape[0])
            out.append(torch.stack([cache[n][rows, index] for n in names], dim=1))
        return out

    def ours_eager():
        out = []
        with BoundaryCapture(twin.model) as cap:
            for ids, mask, index in groups:
                out.append(cap.run(ids, mask, index))
        return out

    methods = {"plain": plain, "capture": ours(), "hidden": hidden, "tl-cache": tl_cache,
               "capture-eager": ours_eager}
    methods.update({f"early-{k}": ours(list(range(k + 1))) for k in early})
    times: dict[str, list[float]] = {m: [] for m in methods}
    peaks: dict[str, list[float]] = {m: [] for m in methods}
    with torch.inference_mode():
        plain()  # warm-up
        # correctness first: our vectors equal output_hidden_states' (all but the normed last one) and TL's
        a, b = ours()(), hidden()
        max_err = max(float((x[:, :-1] - y[:, :-1]).abs().max()) for x, y in zip(a, b, strict=True))
        tl_err = max(float((x - y).abs().max() / y.abs().max()) for x, y in zip(tl_cache(), a, strict=True))
        for _ in range(args.rounds):
            for name, fn in methods.items():
                sec, peak = measure(fn)
                times[name].append(sec)
                peaks[name].append(peak)

    # end to end: prompts -> Arrow folder (model already loaded)
    tmp = tempfile.mkdtemp(prefix="countlens-bench-")
    try:
        config = CaptureConfig().with_options(L=args.L, counts=counts, configs=["count"], seeds=[0],
                                              batch_size=args.batch_size)
        s, _ = measure(lambda: run_capture(config, os.path.join(tmp, "cap"), loaded=loaded, progress=False))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = {m: statistics.median(v) for m, v in times.items()}
    print(f"SmolLM2-135M-Instruct, {len(prompts)} prompts, {n_tokens} tokens (L={args.L}), batch {args.batch_size}, "
          f"{args.rounds} rounds, torch threads {torch.get_num_threads()}, {platform.processor() or platform.machine()}")
    print(f"{'method':<14} {'median s':>9} {'prompts/s':>10} {'tokens/s':>9} {'vs plain':>9} {'peak MiB':>9}")
    for name in methods:
        print(f"{name:<14} {med[name]:9.2f} {len(prompts) / med[name]:10.2f} {n_tokens / med[name]:9.0f} "
              f"{med['plain'] / med[name]:9.3f} {max(peaks[name]):9.1f}")
    print(f"capture / plain speed = {med['plain'] / med['capture']:.3f} (target >= 0.95); capture vs hidden "
          f"{med['hidden'] / med['capture']:.2f}x faster; capture-eager vs tl-cache "
          f"{med['tl-cache'] / med['capture-eager']:.2f}x faster")
    for k in early:
        print(f"early stop after block {k - 1} (locations 0..{k}): {med['capture'] / med[f'early-{k}']:.2f}x "
              f"faster than all {n_blocks} blocks")
    print(f"end-to-end countlens.llm.run_capture (incl. Arrow writes): {len(prompts) / s:.2f} prompts/s, "
          f"{n_tokens / s:.0f} tokens/s")
    print(f"max |capture - output_hidden_states| = {max_err:.2e}; max relative |tl - capture| = {tl_err:.2e}")
    peak = {m: max(v) for m, v in peaks.items()}
    write_row("bench_capture", "capture",
              what=f"capture, SmolLM2, {n_blocks + 1} locations, {len(prompts)} prompts (L = {args.L})",
              countlens=f"hooks at the boundary, {med['capture']:.2f} s", baseline=f"a plain forward ({med['plain']:.2f} s)",
              ratio=f"{med['plain'] / med['capture']:.3f}",
              note=f"of its speed (target ≥ 0.95); {peak['hidden'] / peak['capture']:.1f}× less memory than "
                   f"`output_hidden_states`, {peak['tl-cache'] / peak['capture-eager']:.1f}× less than TransformerLens",
              command=this_command())
    if args.json:
        from countlens.core.io import provenance, write_json_atomic

        write_json_atomic(args.json, {"prompts": len(prompts), "tokens": n_tokens, "median_seconds": med,
                                      "peak_mib": {m: max(v) for m, v in peaks.items()},
                                      "end_to_end_seconds": s, "max_err_hidden": max_err, "max_rel_err_tl": tl_err,
                                      "provenance": provenance(vars(args))})


if __name__ == "__main__":
    main()
