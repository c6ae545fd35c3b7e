"""Run every benchmark in this folder, one after another (``make bench``).

Each ``bench_*.py`` prints its own figures and ratio against the baseline a user would otherwise use. Each
run is also written, machine-readable, to ``bench/results/<bench>.json``: its command, date, machine, wall
time, exit status, everything it printed and the lines that state a ratio; the docs site's benchmark page
shows them under BENCHMARKS.md's current table (``docsgen/benchmarks.py``). Each bench also records the
figures of its table rows with ``bench/record.py`` (``bench/results/rows/<bench>.json``); at the end, failed
benches or not, BENCHMARKS.md is regenerated from those rows (``bench/table.py``), so a rerun refreshes the table.

    python bench/run_all.py [bench_ridge bench_toy_check ...]   # default: every bench_*.py
"""

import importlib.util
import json
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import table  # noqa: E402
from record import load_now, this_machine  # noqa: E402

results = here / "results"
# benchmarks that read what `make demo` wrote (run from the repository root)
NEEDS = {"bench_lens.py": Path("report/capture/acts")}
# benchmarks against a peer that is not a dependency (installed beside the project, e.g. on PYTHONPATH)
PEERS = {"bench_das.py": "pyvene"}
PROGRESS = re.compile(r"\d+%\|.*\|.*(it/s|s/it|\?it)|^\s*$")
RATIO = re.compile(r"ratio|speed-up|faster|slower|\d(\.\d+)?\s*[x×]\b", re.I)


failed = []
results.mkdir(exist_ok=True)
wanted = {Path(a).stem for a in sys.argv[1:]}
unknown = wanted - {p.stem for p in here.glob("bench_*.py")}
if unknown:
    print(f"no such bench: {', '.join(sorted(unknown))}; name them as bench/bench_*.py's stems, e.g. bench_ridge",
          file=sys.stderr)
    sys.exit(2)
for script in sorted(here.glob("bench_*.py")):
    if wanted and script.stem not in wanted:
        continue
    print(f"== {script.name}", flush=True)
    if script.name in NEEDS and not NEEDS[script.name].exists():
        print(f"skipped: it reads {NEEDS[script.name]}; run `make demo` first", flush=True)
        continue
    if script.name in PEERS and importlib.util.find_spec(PEERS[script.name]) is None:
        print(f"skipped: it compares with {PEERS[script.name]}, not installed (see the script's docstring)", flush=True)
        continue
    record = {"command": f"python bench/{script.name}", "machine": f"{this_machine()}, {load_now()}",
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        if not PROGRESS.search(line):  # progress bars are shown, not recorded
            lines.append(line.rstrip("\n"))
    code = proc.wait()
    record.update({"wall_s": time.perf_counter() - start, "exit": code, "output": lines,
                   "ratio_lines": [ln.strip() for ln in lines if RATIO.search(ln)]})
    (results / f"{script.stem}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    if code != 0:
        failed.append(script.name)
table.main([])  # BENCHMARKS.md from every bench's recorded rows
if failed:
    sys.exit(f"benchmarks failed: {', '.join(failed)}")
