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

    python bench/bench_capture.py                    # 48 prompts, L=64, 5 rounds
    python bench/bench_capture.py --prompts 96 --rounds 5 --json bench/out/capture.json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=48, help="number of prompts (counts spread over 0..L)")
    parser.add_argument("--L", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--early", default="1,8,15", help="k values for the early-stop rows")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", default=None, help="write the measurements here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers.utils import logging as hf_logging

    from countlens.llm.capture import BoundaryCapture, batches, length_sorted, pad_batch, pad_token_id
    from countlens.llm.experiments import CaptureConfig, run_capture
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
    if args.json:
        from countlens.core.io import provenance, write_json_atomic

        write_json_atomic(args.json, {"prompts": len(prompts), "tokens": n_tokens, "median_seconds": med,
                                      "peak_mib": {m: max(v) for m, v in peaks.items()},
                                      "end_to_end_seconds": s, "max_err_hidden": max_err, "max_rel_err_tl": tl_err,
                                      "provenance": provenance(vars(args))})


if __name__ == "__main__":
    main()
