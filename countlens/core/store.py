"""The activation data-set format shared by LLM captures and toy representations.

A capture folder holds

    DIR/meta.json            what made it: model, locations, d, dtype, prompt settings, versions
    DIR/shards/00000/ ...    one ``datasets.Dataset.save_to_disk`` folder per finished batch of rows

with one row per prompt (or per toy count pair) and columns

    acts            (n_locations, d) float32 or float16: the boundary vector at every location
    n, m            the count and the number of distractors
    pair            token pair name (``"toy"`` for the toy)
    config          prompt configuration name (the toy variant for the toy)
    seed            prompt seed (the parameter seed for the toy)
    prompt          the rendered text fed to the tokenizer ("" for the toy)
    boundary_index  token index of the boundary in the prompt (0 for the toy)
    n_tokens        prompt length in tokens (1 + n + m for the toy)
    first_item_index, last_item_index
                    token indices of the first and last item in the prompt (-1 without items, and for
                    the toy and captures made before these columns existed)

A capture with the model's answers (``llm capture --answers``) adds :data:`ANSWER_COLUMNS` and, since the
answer became a distribution over counts, :data:`DISTRIBUTION_COLUMNS`

    answer_text, answer, answer_logprob
                    the greedy answer's text, its parsed integer (null when it does not parse), and the
                    log-probability of the correct count as the final answer (nats; docs/definitions.md §2.9)
    answer_logprobs the log-probability of every candidate count as the final answer (a list per row; the
                    candidates ``meta["answer_candidates"]`` are the capture's ``min(counts)..max(counts)``)
    answer_expected Σ k p(k), p normalised over the candidates
    answer_rank     rank of the correct count among the candidates (1 = the most likely)

A capture of every item position (``llm capture --positions items``) holds one row per (prompt, position)
— each prompt's items in order, then its boundary — and adds :data:`POSITION_COLUMNS`

    prompt_id       the prompt's row in the capture's plan (every row of one prompt shares it)
    position        the row's token index in the prompt (the boundary row: ``boundary_index``)
    item_index      0-based order of the item in the list; -1 for the boundary row
    is_target       whether the item is a target (False on the boundary row)
    running_count   targets among items 0..item_index; ``n`` on the boundary row

Each shard is written to a temporary folder and renamed into place, so a shard either exists whole or not
at all; an interrupted run resumes from the shards present. :func:`load_capture` returns the whole capture
as one ``datasets.Dataset`` (memory-mapped), whatever the shard layout; the readers of activations open a
folder as one typed :class:`countlens.core.capture.Capture` (:func:`~countlens.core.capture.open_capture`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from countlens.core.cache import refuse_other_settings
from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.io import read_json, write_json_atomic

META = "meta.json"
SHARDS = "shards"
COLUMNS = ("acts", "n", "m", "pair", "config", "seed", "prompt", "boundary_index", "n_tokens",
           "first_item_index", "last_item_index")
# Columns a writer may leave out, and the value they then get.
OPTIONAL_COLUMNS = {"first_item_index": -1, "last_item_index": -1}
# The model's own answer, written only by a capture with answers (all three or none; ``answer`` is null
# where the text does not parse).
ANSWER_COLUMNS = ("answer_text", "answer", "answer_logprob")
# The answer as a distribution over the candidate counts (all three or none).
DISTRIBUTION_COLUMNS = ("answer_logprobs", "answer_expected", "answer_rank")
# One row per (prompt, position) of an items capture (all five or none).
POSITION_COLUMNS = ("prompt_id", "position", "item_index", "is_target", "running_count")


def features(n_locations: int, d: int, dtype: str = "float32", answers: bool = False,
             distribution: bool = False, positions: bool = False):
    """The ``datasets.Features`` of a capture with ``n_locations`` locations of width ``d`` (with
    ``answers``, also the :data:`ANSWER_COLUMNS`; with ``distribution`` the :data:`DISTRIBUTION_COLUMNS`;
    with ``positions`` the :data:`POSITION_COLUMNS`, after the others)."""
    import datasets

    extra = {"answer_text": datasets.Value("string"), "answer": datasets.Value("int64"),
             "answer_logprob": datasets.Value("float64")} if answers else {}
    if distribution:
        extra.update({"answer_logprobs": datasets.Sequence(datasets.Value("float64")),
                      "answer_expected": datasets.Value("float64"), "answer_rank": datasets.Value("int32")})
    if positions:
        extra.update({"prompt_id": datasets.Value("int32"), "position": datasets.Value("int32"),
                      "item_index": datasets.Value("int32"), "is_target": datasets.Value("bool"),
                      "running_count": datasets.Value("int32")})
    return datasets.Features({
        "acts": datasets.Array2D(shape=(n_locations, d), dtype=dtype),
        "n": datasets.Value("int32"),
        "m": datasets.Value("int32"),
        "pair": datasets.Value("string"),
        "config": datasets.Value("string"),
        "seed": datasets.Value("int32"),
        "prompt": datasets.Value("string"),
        "boundary_index": datasets.Value("int32"),
        "n_tokens": datasets.Value("int32"),
        "first_item_index": datasets.Value("int32"),
        "last_item_index": datasets.Value("int32"),
        **extra,
    })


class ActivationWriter:
    """Writes a capture folder shard by shard.

    ``meta`` must hold at least ``locations`` (list of names) and ``d``; ``dtype`` defaults to float32.
    Opening a folder that already holds a capture with *different* ``meta["settings"]`` raises
    :class:`UsageError` (a run is never mixed with another); the same settings resume.
    """

    def __init__(self, out_dir: str | os.PathLike, meta: dict[str, Any]):
        self.dir = Path(out_dir)
        self.meta = dict(meta)
        self.meta.setdefault("dtype", "float32")
        for key in ("locations", "d"):
            if key not in self.meta:
                raise ValueError(f"capture meta needs {key!r}")
        fresh = existing_capture(self.dir, self.meta.get("settings")) is None
        (self.dir / SHARDS).mkdir(parents=True, exist_ok=True)
        if fresh:
            write_json_atomic(self.dir / META, {**self.meta, "complete": False})

    def finished_shards(self) -> set[int]:
        """Indices of the shards already on disk and readable (a corrupted one is removed, to be redone)."""
        import datasets

        done = set()
        for path in sorted((self.dir / SHARDS).iterdir()):
            if path.name.startswith(".") or not path.name.isdigit():
                shutil.rmtree(path, ignore_errors=True)  # a temporary folder left by an interruption
                continue
            try:
                datasets.load_from_disk(str(path))
                done.add(int(path.name))
            except Exception:  # noqa: BLE001 - any unreadable shard is recomputed
                shutil.rmtree(path, ignore_errors=True)
        return done

    def write_shard(self, index: int, rows: dict[str, Any]) -> Path:
        """Write one shard atomically. ``rows["acts"]`` is (rows, n_locations, d); other columns are lists."""
        import datasets

        acts = np.asarray(rows["acts"], dtype=self.meta["dtype"])
        if acts.ndim != 3 or acts.shape[1:] != (len(self.meta["locations"]), self.meta["d"]):
            raise ValueError(f"acts has shape {acts.shape}, expected (rows, {len(self.meta['locations'])}, "
                             f"{self.meta['d']})")
        if not np.all(np.isfinite(acts)):
            raise ConfigError("dtype", "captured activations hold NaN or inf; try {dtype:float32}")
        answers = all(k in rows for k in ANSWER_COLUMNS)
        distribution = answers and all(k in rows for k in DISTRIBUTION_COLUMNS)
        positions = all(k in rows for k in POSITION_COLUMNS)
        names = (COLUMNS + (ANSWER_COLUMNS if answers else ()) + (DISTRIBUTION_COLUMNS if distribution else ())
                 + (POSITION_COLUMNS if positions else ()))
        data = {k: rows[k] if k in rows or k not in OPTIONAL_COLUMNS else [OPTIONAL_COLUMNS[k]] * len(acts)
                for k in names if k != "acts"}
        data["acts"] = acts
        ds = datasets.Dataset.from_dict(data, features=features(acts.shape[1], acts.shape[2], self.meta["dtype"],
                                                                answers, distribution, positions))
        final = self.dir / SHARDS / f"{index:05d}"
        tmp = Path(tempfile.mkdtemp(prefix=f".{index:05d}.", dir=self.dir / SHARDS))
        bars_were_on = not datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # one bar per shard would bury the caller's own progress bar
        try:
            ds.save_to_disk(str(tmp))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if bars_were_on:
                datasets.enable_progress_bars()
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return final

    def finish(self, extra: dict[str, Any] | None = None) -> Path:
        """Mark the capture complete (``meta.json`` gets ``complete: true`` and any ``extra`` keys)."""
        return write_json_atomic(self.dir / META, {**self.meta, **(extra or {}), "complete": True})


def existing_capture(out_dir: str | os.PathLike, settings: Any) -> dict[str, Any] | None:
    """The ``meta.json`` of the capture in ``out_dir`` made with ``settings`` (it resumes), or ``None`` for
    a missing or empty folder; :class:`UsageError` for a capture made with other settings or a folder that
    holds something else. Reads only ``meta.json``, so it can run before any slow work."""
    out_dir = Path(out_dir)
    if (out_dir / META).exists():
        old = read_json(out_dir / META, "capture metadata")
        refuse_other_settings(out_dir, "a capture", old.get("settings"), settings)
        return old
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError("out", f"{literal(out_dir)} exists and is not a countlens capture; choose an empty {{out}} "
                                 "folder")
    return None


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The ``meta.json`` of a capture folder; :class:`UsageError` if the folder is not a capture."""
    path = Path(path)
    if not (path / META).is_file():
        raise UsageError(f"{path} is not a countlens activation folder (no {META}); "
                         "make one with `countlens llm capture` or `countlens probe toy-acts`")
    return read_json(path / META, "capture metadata")


def load_capture(path: str | os.PathLike, allow_incomplete: bool = False):
    """Load a capture folder's rows as one ``datasets.Dataset`` (memory-mapped); its metadata stays in
    ``meta.json`` (:func:`read_meta`; :func:`countlens.core.capture.open_capture` reads both).
    Raises :class:`UsageError` if the folder is not a capture, is unfinished (unless ``allow_incomplete``),
    or has no rows.
    """
    import datasets

    meta = read_meta(path)
    if not meta.get("complete") and not allow_incomplete:
        raise UsageError(f"{path} holds an unfinished capture; rerun the capture command to complete it")
    shard_dirs = sorted(p for p in (Path(path) / SHARDS).glob("[0-9]*") if p.is_dir())
    if not shard_dirs:
        raise UsageError(f"{path} holds no activations")
    try:
        parts = [datasets.load_from_disk(str(p)) for p in shard_dirs]
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"{path}: a shard is unreadable ({exc.__class__.__name__}); rerun the capture to "
                         "recompute it") from None
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    if meta.get("complete") and "n_rows" in meta and len(ds) != meta["n_rows"]:
        raise UsageError(f"{path} holds {len(ds)} of its {meta['n_rows']} rows (a shard is missing); rerun the "
                         "capture command to recompute it")
    return ds


def stored_dtype(ds) -> str:
    """The dtype ``acts`` is stored in, from the data set's own features (float32 for a data set without
    activations)."""
    feature = ds.features.get("acts")
    return str(getattr(feature, "dtype", None) or "float32")


def iter_batches(ds, columns: Sequence[str] = ("acts", "n"), location: int | None = None,
                 batch_size: int = 512) -> Iterator[dict[str, np.ndarray]]:
    """Stream a capture in row batches: a dict of numpy arrays per batch, ``acts`` in the *stored* dtype,
    (rows, n_locations, d), or (rows, d) for one location index.

    This is the one reader of activations: ``datasets``' numpy formatter casts floats to float32 unless
    told the dtype, so a float64 toy export would lose precision silently; here the stored dtype is asked
    for explicitly.
    """
    stored = stored_dtype(ds)
    view = ds.with_format("numpy", columns=list(columns), dtype=stored)
    for start in range(0, len(view), batch_size):
        batch = dict(view[start:start + batch_size])
        if "acts" in batch and location is not None:
            batch["acts"] = batch["acts"][:, location, :]
        yield batch


def acts_array(ds, location: int | None = None, dtype=np.float64) -> np.ndarray:
    """All activations, widened to ``dtype``: (rows, n_locations, d), or (rows, d) for one location."""
    parts = [np.asarray(b["acts"], dtype=dtype) for b in iter_batches(ds, ("acts",), location)]
    return np.concatenate(parts) if parts else np.zeros((0,), dtype=dtype)


def column(ds, name: str) -> np.ndarray:
    """One column (``n``, ``m``, ``seed``, ...) as a numpy array in its stored dtype: (rows,), or (rows, k) for
    a fixed-length list column (``answer_logprobs``); text as a unicode array.

    Read as one Arrow slice (which follows a selection's row order): ``ds[name]`` is a lazy column that numpy
    would read row by row, 100x slower (0.28 s against 3 ms for 2,000 rows)."""
    import pyarrow as pa

    values = ds.with_format("arrow", columns=[name])[:].column(name)
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type) or pa.types.is_boolean(values.type):
        return values.to_numpy()
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return np.asarray(values.to_pylist())
    return np.asarray(ds.with_format("numpy", columns=[name])[:][name])


__all__ = ["META", "SHARDS", "COLUMNS", "OPTIONAL_COLUMNS", "ANSWER_COLUMNS", "DISTRIBUTION_COLUMNS",
           "POSITION_COLUMNS", "features", "ActivationWriter", "existing_capture",
           "read_meta", "load_capture",
           "stored_dtype", "iter_batches", "acts_array", "column"]
