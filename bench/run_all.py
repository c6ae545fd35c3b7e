"""Run every benchmark in this folder, one after another (``make bench``).

Each ``bench_*.py`` prints its own figures and ratio against the baseline a user would otherwise use;
BENCHMARKS.md records the latest figures and the command that reran each one.
"""

import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
# benchmarks that read what `make demo` wrote (run from the repository root)
NEEDS = {"bench_lens.py": Path("report/capture/acts")}
failed = []
for script in sorted(here.glob("bench_*.py")):
    print(f"== {script.name}", flush=True)
    if script.name in NEEDS and not NEEDS[script.name].exists():
        print(f"skipped: it reads {NEEDS[script.name]}; run `make demo` first", flush=True)
        continue
    if subprocess.call([sys.executable, str(script)]) != 0:
        failed.append(script.name)
if failed:
    sys.exit(f"benchmarks failed: {', '.join(failed)}")
