"""Benchmark: reading, checking and building the prompts of a 10,000-record ``file:PATH`` task vs capturing the
same prompts (boundary rows, every location) on the embedded SmolLM2-135M-Instruct (issue 30: target <= 5 %).

The file holds natural object lists (the ``objects`` task's messages, counts 0..``--max-count``, items up to
``--L``, written out as records with their ``count``, character ``spans`` and ``targets``), one JSON object a
line. Measured, with the tokenizer and the model already loaded (both steps need them; loading is not counted):

  build     ``PromptSettings(task="file:...")`` (reads and checks every record) + ``build_prompts`` (chat
            template, tokenization with offsets, every item's token, the merge and boundary checks): the
            median of ``--rounds`` rounds, the file's cache of checked records cleared before each
  capture   ``run_capture`` (boundary rows, all locations, batch ``--batch-size``) of a random sample of
            ``--sample`` records (written as a file of their own), per prompt, scaled to the whole file;
            capturing all 10,000 prompts would take long on 2 cores, so the capture is measured on the sample
            and the output says so

    python bench/bench_tasks.py                                   # 10,000 records, capture sampled on 200
    python bench/bench_tasks.py --records 2000 --sample 100 --json bench/out/tasks.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from record import env_prefix, this_command, write_row  # bench/ is on sys.path when run as a script


def write_records(path: Path, n_records: int, L: int, max_count: int, seed: int = 0) -> list[dict]:
    """``n_records`` records of object lists (the ``objects`` task's three wordings and five categories), each
    with its count, spans and targets, written to ``path`` as JSONL; returns them."""
    from countlens.llm.tasks import CATEGORIES, parse_task

    rng = np.random.default_rng(seed)
    tasks = [parse_task(f"objects:category={c}") for c in CATEGORIES]
    records = []
    for i in range(n_records):
        n = int(rng.integers(0, max_count + 1))
        task, config = tasks[i % len(tasks)], ("count", "how-many", "tally")[i % 3]
        ins = task.instruction(config, None, n, 0, int(rng.integers(0, 2**31)), max(L, n))
        records.append({"text": ins.text, "count": n, "spans": ins.spans.tolist(), "targets": ins.targets.tolist()})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--sample", type=int, default=200, help="records captured (scaled per prompt)")
    ap.add_argument("--L", type=int, default=40, help="most items per record")
    ap.add_argument("--max-count", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from countlens.llm import CaptureConfig, run_capture
    from countlens.llm.models import load_model, quiet_transformers
    from countlens.llm.prompts import PromptSettings, build_prompts
    from countlens.llm.tasks import file as file_task

    quiet_transformers()
    loaded = load_model("default", progress=False)
    tok = loaded.tokenizer
    tmp = Path(tempfile.mkdtemp(prefix="countlens-bench-tasks-"))
    try:
        records = write_records(tmp / "records.jsonl", args.records, args.L, args.max_count)
        counts = list(range(0, args.max_count + 1))
        size = (tmp / "records.jsonl").stat().st_size

        def build():
            file_task._READ.clear()  # read and check the file afresh every round
            settings = PromptSettings(task=f"file:{tmp / 'records.jsonl'}", counts=counts, L=max(args.L, args.max_count))
            return build_prompts(tok, settings)

        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            prompts = build()
            times.append(time.perf_counter() - start)
        build_s = statistics.median(times)
        assert len(prompts) == args.records
        tokens = sum(p.n_tokens for p in prompts)

        pick = np.random.default_rng(1).choice(args.records, size=min(args.sample, args.records), replace=False)
        sample = tmp / "sample.jsonl"
        sample.write_text("".join(json.dumps(records[i]) + "\n" for i in sorted(pick)))
        config = CaptureConfig().with_options(task=f"file:{sample}", counts=counts, L=max(args.L, args.max_count),
                                              batch_size=args.batch_size)
        start = time.perf_counter()
        run_capture(config, tmp / "cap", loaded=loaded, progress=False)
        capture_s = time.perf_counter() - start
        sample_tokens = sum(len(tok(tok.apply_chat_template([{"role": "user", "content": records[i]["text"]}],
                                                            tokenize=False, add_generation_prompt=True),
                                    add_special_tokens=False)["input_ids"]) for i in pick)
        per_prompt = capture_s / len(pick)
        capture_all = per_prompt * args.records
        ratio = build_s / capture_all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"SmolLM2-135M-Instruct (embedded), torch threads {torch.get_num_threads()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"file: {args.records:,} JSONL records ({size / 2**20:.1f} MiB), counts 0..{args.max_count}, up to "
          f"{args.L} items, {tokens:,} tokens in all ({tokens / args.records:.0f} per prompt)")
    print(f"build + check (read, check records, render, tokenize, locate items): {build_s:.2f} s median of "
          f"{args.rounds} ({args.records / build_s:,.0f} prompts/s; rounds {', '.join(f'{t:.2f}' for t in times)})")
    print(f"capture (boundary, all locations, batch {args.batch_size}) MEASURED ON A SAMPLE of {len(pick)} "
          f"records ({sample_tokens:,} tokens): {capture_s:.1f} s = {per_prompt * 1000:.0f} ms per prompt; "
          f"SCALED per prompt to {args.records:,} prompts: {capture_all:.0f} s")
    print(f"build / capture = {ratio:.4f} ({100 * ratio:.2f} %; target <= 5 %)")
    write_row("bench_tasks", "file_task", what=f"a {args.records:,}-record `file:` task, built and checked",
              countlens=f"{build_s:.2f} s (median of {args.rounds})",
              baseline=f"capturing the same prompts ({capture_all:,.0f} s, scaled from {len(pick)})",
              ratio=f"{100 * ratio:.2f} %", note="target ≤ 5 %", command=this_command(env_prefix(("OMP_NUM_THREADS",))))
    if args.json:
        from countlens.core.io import provenance, write_json_atomic

        write_json_atomic(args.json, {"records": args.records, "tokens": tokens, "build_seconds": times,
                                      "sample": len(pick), "capture_sample_seconds": capture_s,
                                      "capture_scaled_seconds": capture_all, "ratio": ratio,
                                      "torch_threads": torch.get_num_threads(), "provenance": provenance({})})


if __name__ == "__main__":
    main()
