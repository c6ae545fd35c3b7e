"""How far Figure 9a's float32 numbers lie from the same computation in float64, per column.

``python bench/float32_floor.py [--preset test] [--against CSV ...] [--out DIR]``

Runs the boundary patching of :func:`countlens.llm.patching.experiment.run_patching` (the preset's config, the
embedded model by default) twice on the same weights: as loaded (float32) and on a float64 copy of them
(:func:`countlens.llm.organisms.checks.exact_copy`), and prints, per numeric column of ``patching.csv``, the
largest |float32 - float64|. Each ``--against`` file (another run's ``patching.csv`` of the same config, e.g. the
code before a change) gets its own column. This is the floor below which two float32 runs that compute the
same quantity in another order cannot be told apart: a comparison with ``bench/same_results.py --tolerance``
means something only above it. ``--out`` keeps both runs' result folders and ``floor.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
from pathlib import Path

from same_results import number  # bench/ is on sys.path when run as a script

# identifiers, counts and ranks: integers, the same in every run
NOT_VALUES = {"location_index", "seed", "n_source", "n_target", "rank_target", "rank_patched"}


def numeric_columns(rows: list[dict[str, str]]) -> list[str]:
    """The columns of a ``patching.csv`` whose every cell is a number (empty cells aside) and that hold values."""
    return [c for c in rows[0] if c not in NOT_VALUES and any(r[c] for r in rows)
            and all(number(r[c]) is not None for r in rows if r[c])]


def largest_gaps(rows: list[dict[str, str]], reference: list[dict[str, str]]) -> dict[str, float]:
    """Largest |row - reference| per numeric column, rows in the same order (the same config)."""
    if len(rows) != len(reference):
        raise SystemExit(f"{len(rows)} rows against the reference's {len(reference)}: not the same config")
    return {c: max((abs(float(a[c]) - float(b[c])) for a, b in zip(rows, reference, strict=True) if a[c] and b[c]),
                   default=0.0) for c in numeric_columns(reference)}


def label(name: str) -> str:
    """A column's heading: ``this code, float32``, or the folder an ``--against`` file's stage is in."""
    path = Path(name)
    return name if len(path.parts) < 3 else path.parts[-3][-28:]


def read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="test", help="the patching config's size preset (default: test)")
    parser.add_argument("--against", type=Path, nargs="*", default=[],
                        help="other float32 runs' patching.csv of the same config (default: none)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs and floor.json here (default: a "
                                                                "temporary folder)")
    args = parser.parse_args()

    import countlens as cl
    from countlens.llm.organisms.checks import exact_copy
    from countlens.llm.patching.experiment import run_patching

    out = args.out or Path(tempfile.mkdtemp(prefix="countlens-float32-floor-"))
    config = cl.config("patching", args.preset)
    loaded = config.model.load(progress=False)
    runs = {"float32": loaded, "float64": exact_copy(loaded)}
    for name, model in runs.items():
        run_patching(config, loaded=model).save(out / name)
    reference = read(out / "float64" / "patching.csv")
    gaps = {"this code, float32": largest_gaps(read(out / "float32" / "patching.csv"), reference)}
    gaps.update({str(path): largest_gaps(read(path), reference) for path in args.against})
    names = list(gaps)
    print("largest |float32 - float64| per column of patching.csv, preset", args.preset)
    print(f"{'column':26s}" + "".join(f"{label(n):>30s}" for n in names))
    for column in reference[0]:
        if column in gaps[names[0]]:
            print(f"{column:26s}" + "".join(f"{gaps[n][column]:30.2e}" for n in names))
    (out / "floor.json").write_text(json.dumps({"preset": args.preset, "config": config.to_dict(), "gaps": gaps},
                                               indent=1), encoding="utf-8")
    print(f"written to {out}{os.sep}")


if __name__ == "__main__":
    main()
