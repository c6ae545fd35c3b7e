"""Run every benchmark in this folder, one after another (``make bench``).

Each ``bench_*.py`` prints its own figures and ratio against the baseline a user would otherwise use. Each
run is also written, machine-readable, to ``bench/results/<bench>.json``: its command, date, machine, wall
time, exit status, everything it printed and the lines that state a ratio; the docs site's benchmark page
shows them under BENCHMARKS.md's current table (``docsgen/benchmarks.py``).
"""

import json
import os
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

here = Path(__file__).resolve().parent
results = here / "results"
# benchmarks that read what `make demo` wrote (run from the repository root)
NEEDS = {"bench_lens.py": Path("report/capture/acts")}
RATIO = re.compile(r"ratio|speed-up|faster|slower|\d(\.\d+)?\s*[x×]\b", re.I)


def machine() -> str:
    """This machine in one line: CPU model, cores, memory, the load when the bench started."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} cores, load {load:.1f}"


failed = []
results.mkdir(exist_ok=True)
for script in sorted(here.glob("bench_*.py")):
    print(f"== {script.name}", flush=True)
    if script.name in NEEDS and not NEEDS[script.name].exists():
        print(f"skipped: it reads {NEEDS[script.name]}; run `make demo` first", flush=True)
        continue
    record = {"command": f"python bench/{script.name}", "machine": machine(),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    record.update({"wall_s": time.perf_counter() - start, "exit": code, "output": lines,
                   "ratio_lines": [ln.strip() for ln in lines if RATIO.search(ln)]})
    (results / f"{script.stem}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    if code != 0:
        failed.append(script.name)
if failed:
    sys.exit(f"benchmarks failed: {', '.join(failed)}")
