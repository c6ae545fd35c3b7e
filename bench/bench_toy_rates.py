"""`countlens toy rates` for all seven variants on L = 10,30,100,300,1000 at d = 16 (target: < 60 s), timed
as a user runs it (a fresh process), next to the time of one plain numpy-loop check per construction, which
is what a bisection over the norm would otherwise repeat.

    python bench/bench_toy_rates.py
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import this_command, write_row  # bench/ is on sys.path when run as a script


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rates.json"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "countlens", "toy", "rates", "--d", "16", "--L", "10,30,100,300,1000",
                        "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        data = json.loads(out.read_text())
    print(f"countlens toy rates --d 16 --L 10,30,100,300,1000 (7 variants): {wall:.1f} s (target < 60 s)")
    for v, row in data["variants"].items():
        slope = "-" if row["slope"] is None else f"{row['slope']:.3f}"
        print(f"  {v:24s} slope {slope:>6s} (claimed {row['claimed']})")
    write_row("bench_toy_rates", "rates", what=f"`countlens toy rates`, {len(data['variants'])} variants, L ≤ 1000, d = 16",
              countlens=f"{wall:.0f} s, a fresh process", baseline="target < 60 s", ratio=f"{wall / 60:.2f}",
              note="of the target", command=this_command())


if __name__ == "__main__":
    main()
