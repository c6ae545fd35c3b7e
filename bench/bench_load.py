"""Seconds before the first check and the first prompt, for GGUF files (issue 23).

1. **The check before loading.** What a capture checks before the weights (architecture, context length,
   blocks, chat template, special tokens), read by ``countlens.llm.gguf.read_header`` against today's path
   (``gguf.GGUFReader`` over the whole file, then transformers' conversion of the vocabulary to a fast
   tokenizer and of the metadata to a config, as ``plan_capture`` did before this change), on the embedded
   SmolLM2 GGUF (49k tokens) and on a tiny GGUF written by the tests' helper with a 200k-token vocabulary.
   Then the whole command: ``countlens llm capture`` on that large-vocabulary file without a chat template,
   from the command's start to its one-line refusal, in a fresh process (target: within 5 s).
2. **Convert once.** From a fresh process's start to the model ready for its first prompt (plan + load,
   one forward), with an empty cache (the first capture: converts and caches), again (the second: reads the
   cache; target at most 15 % of the first's load), and with ``no_cache`` (what every capture paid before);
   then the floor: plain transformers loading the same cached float folder (``AutoTokenizer`` and
   ``AutoModelForCausalLM.from_pretrained`` on it, imports included), the fastest any transformers user
   could have those float weights ready. On the embedded SmolLM2, on the 200k-token file, and on a random
   GGUF of a 0.5B chat model's size class (24 blocks, width 1024, 150k tokens: 387M parameters, Q8_0),
   the size of the files the issue was reported on.

Every timing runs in a fresh Python process (imports included, the OS file cache warm), one after another.

    python bench/bench_load.py [--vocab 200000] [--model PATH.gguf] [--no-synthetic]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import span, this_command, write_row  # bench/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]

HEADER = """
import sys, time, json
t0 = time.perf_counter()
from countlens.llm.gguf import read_header
t1 = time.perf_counter()
h = read_header(sys.argv[1])
facts = h.facts()
print("@@" + json.dumps({"work_s": time.perf_counter() - t1, "import_s": t1 - t0, "facts": facts}))
"""

CLI_IMPORT = """
import time, json
t0 = time.perf_counter()
import countlens.llm.capture.cli  # the capture command (countlens.llm.cli is the area alone)
print("@@" + json.dumps({"import_s": time.perf_counter() - t0}))
"""

TODAY = """
import sys, time, json, os
t0 = time.perf_counter()
import gguf
from transformers import AutoConfig, AutoTokenizer
from transformers.utils import logging
logging.set_verbosity_error()
path = sys.argv[1]
folder, name = os.path.dirname(path), os.path.basename(path)
t1 = time.perf_counter()
reader = gguf.GGUFReader(path)
t2 = time.perf_counter()
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
t3 = time.perf_counter()
cfg = AutoConfig.from_pretrained(folder, gguf_file=name)
t4 = time.perf_counter()
print("@@" + json.dumps({"work_s": t4 - t0, "import_s": t1 - t0, "reader_s": t2 - t1, "tokenizer_s": t3 - t2,
                         "config_s": t4 - t3, "chat_template": tok.chat_template is not None}))
"""

FIRST_PROMPT = """
import sys, time, json
t0 = time.perf_counter()
from countlens.llm.capture.experiment import CaptureConfig, plan_capture
from countlens.llm.models import load_model, quiet_transformers
from countlens.llm.capture.residuals import pad_batch, pad_token_id
quiet_transformers()
ti = time.perf_counter()
config = CaptureConfig().with_options(model=sys.argv[1], no_cache=sys.argv[2] == "1", L=16, counts=[0, 3],
                                      pairs=[["a", "b"]], configs=["count"], seeds=[0])
plan = plan_capture(config, progress=False)
t1 = time.perf_counter()
loaded = load_model(plan.ref, progress=False, tokenizer=plan.tokenizer)
t2 = time.perf_counter()
import torch
ids, mask, _ = pad_batch(plan.prompts[:1], pad_token_id(plan.tokenizer))
with torch.inference_mode():
    loaded.model(input_ids=ids, attention_mask=mask)
t3 = time.perf_counter()
print("@@" + json.dumps({"import_s": ti - t0, "plan_s": t1 - ti, "load_s": t2 - t1, "to_first_prompt_s": t2 - t0,
                         "first_prompt_s": t3 - t2}))
"""

FLOOR = """
import sys, time, json
t0 = time.perf_counter()
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging
logging.set_verbosity_error()
ti = time.perf_counter()
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float32)
t2 = time.perf_counter()
print("@@" + json.dumps({"import_s": ti - t0, "to_first_prompt_s": t2 - t0}))
"""


def run(code_or_argv, *args, env=None) -> tuple[float, dict | None, str]:
    """(wall seconds of a fresh process, its @@ record, its stderr's last line)."""
    argv = code_or_argv if isinstance(code_or_argv, list) else [sys.executable, "-c", code_or_argv, *args]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {}),
                                                                     "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    record = next((json.loads(line[2:]) for line in done.stdout.splitlines() if line.startswith("@@")), None)
    if record is None and done.returncode not in (0, 2):
        raise RuntimeError(done.stderr[-2000:])
    last = [line for line in done.stderr.splitlines() if line.strip()]
    return wall, record, last[-1] if last else ""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=200_000, help="tokens of the large tiny GGUF")
    ap.add_argument("--model", default=None, help="a GGUF file for part 2 (default: the embedded SmolLM2, the "
                    "200k-token file and the synthetic 0.5B-class file)")
    ap.add_argument("--no-synthetic", action="store_true", help="skip the 387M-parameter random GGUF (writing it "
                    "takes 15 s and 411 MB, its loads about 2.5 minutes)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from countlens.llm.models import embedded_gguf
    from tests.helpers.tiny_gguf import write_tiny_gguf

    print(f"load average at start: {load()} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        large = write_tiny_gguf(tmp / "large-vocab.gguf", extra_tokens=args.vocab)
        base = write_tiny_gguf(tmp / "large-vocab-base.gguf", chat_template=None, extra_tokens=args.vocab)
        print(f"wrote two {large.stat().st_size / 1e6:.1f} MB GGUF files with {args.vocab + 323:,} tokens in "
              f"{time.perf_counter() - started:.1f} s\n")

        print("1. the check before loading (fresh process each, imports included)")
        checks = []
        for label, path in (("embedded SmolLM2 (49k tokens)", embedded_gguf()), (f"tiny, {args.vocab:,} tokens", large)):
            wall_ours, ours, _ = run(HEADER, str(path))
            wall_today, today, _ = run(TODAY, str(path))
            print(f"  {label}: header {ours['work_s']:.3f} s of work ({wall_ours:.2f} s process) vs today "
                  f"{today['work_s']:.1f} s of work ({wall_today:.1f} s process: GGUFReader {today['reader_s']:.1f} s, "
                  f"tokenizer {today['tokenizer_s']:.1f} s, config {today['config_s']:.1f} s) -> "
                  f"**{today['work_s'] / ours['work_s']:.0f}x** the work, {wall_today / wall_ours:.1f}x the process")
            checks.append((label, ours["work_s"], today["work_s"]))
        env = {"COUNTLENS_CACHE": str(tmp / "cache-refusal")}
        out = tmp / "refused"
        wall, _, line = run(["countlens", "llm", "capture", "--model", str(base), "--out", str(out)], env=env)
        _, imported, _ = run(CLI_IMPORT)
        print(f"  `countlens llm capture` on the {args.vocab:,}-token file without a chat template: refused in "
              f"{wall:.2f} s from the command's start (target 5 s; importing the llm command line alone takes "
              f"{imported['import_s']:.2f} s): {line[:60]}")
        wall_old, today, _ = run(TODAY, str(base))
        print(f"  (before this change the refusal came after the conversion: {wall_old:.1f} s of process)\n")
        label, ours_s, today_s = checks[0]
        write_row("bench_load", "gguf_check", what="GGUF check before loading (header only)",
                  countlens=f"{ours_s:.3f} s ({label})",
                  baseline=f"`GGUFReader` + vocabulary + config ({today_s:.1f} s)", ratio=f"{today_s / ours_s:.0f}×",
                  note=f"a missing chat template refused in {wall:.2f} s (target 5 s)", command=this_command())
        seconds, firsts, ratios, floors_ratio = [], [], [], []

        models = [args.model] if args.model else [str(embedded_gguf()), str(large)]
        if not args.model and not args.no_synthetic:
            started = time.perf_counter()
            big = write_tiny_gguf(tmp / "synthetic-0.4b.gguf", extra_tokens=150_000, n_blocks=24, d=1024, context=4096)
            print(f"wrote a {big.stat().st_size / 1e6:.0f} MB random GGUF (24 blocks, width 1024, 150k tokens) in "
                  f"{time.perf_counter() - started:.1f} s")
            models.append(str(big))
        print("2. from a fresh process's start to the model ready for its first prompt (plan + load)")
        for k, model in enumerate(models):
            print(f"  {Path(model).name}")
            env = {"COUNTLENS_CACHE": str(tmp / f"cache{k}")}
            results = {}
            for label, no_cache in (("no cache (before)", "1"), ("first, empty cache", "0"), ("second, cached", "0"),
                                    ("second, again", "0")):
                wall, rec, _ = run(FIRST_PROMPT, model, no_cache, env=env)
                results[label] = rec
                print(f"    {label:<20} imports {rec['import_s']:4.1f} s  plan {rec['plan_s']:6.1f} s  load "
                      f"{rec['load_s']:6.1f} s  to the first prompt {rec['to_first_prompt_s']:6.1f} s  (process {wall:.1f} s)")
            first, before = results["first, empty cache"], results["no cache (before)"]
            second = min(results["second, cached"], results["second, again"], key=lambda rec: rec["to_first_prompt_s"])
            entry = tmp / f"cache{k}"
            tokenizer_dir = next(p for p in entry.rglob("tokenizer") if p.is_dir())
            weights_dir = next(p for p in entry.rglob("weights") if p.is_dir())
            floors = [run(FLOOR, str(tokenizer_dir), str(weights_dir))[1] for _ in range(2)]
            floor = min(floors, key=lambda rec: rec["to_first_prompt_s"])
            print(f"    {'floor (transformers)':<20} imports {floor['import_s']:4.1f} s  the cached float folder loaded "
                  f"by plain transformers, best of 2: {floor['to_first_prompt_s']:6.1f} s")
            print(f"    second / first: **{second['to_first_prompt_s'] / first['to_first_prompt_s']:.3f}** (target <= "
                  f"0.15; the better of the two seconds); second / no cache: {second['to_first_prompt_s'] / before['to_first_prompt_s']:.3f}; "
                  f"floor / first: {floor['to_first_prompt_s'] / first['to_first_prompt_s']:.3f}; second / floor: "
                  f"{second['to_first_prompt_s'] / floor['to_first_prompt_s']:.2f}")
            size = sum(p.stat().st_size for p in (tmp / f"cache{k}").rglob("*") if p.is_file())
            print(f"    cache entry: {size / 1e6:.0f} MB")
            seconds.append(second["to_first_prompt_s"])
            firsts.append(first["to_first_prompt_s"])
            ratios.append(second["to_first_prompt_s"] / first["to_first_prompt_s"])
            floors_ratio.append(second["to_first_prompt_s"] / floor["to_first_prompt_s"])
        write_row("bench_load", "second_load",
                  what=f"second load of a GGUF model (cached float copy), {len(models)} models",
                  countlens=span(seconds, "{:.1f}", " s"),
                  baseline=f"the first load (conversion, {span(firsts, '{:.1f}', ' s')})",
                  ratio=span(ratios, "{:.3f}"),
                  note=f"target ≤ 0.15; {span(floors_ratio, '{:.2f}', '×')} plain transformers", command=this_command())
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
