"""Results as files: atomic writes, strict JSON, CSV, figures, and the provenance every result carries.

Results are files a user can reuse: JSON for numbers, PNG and PDF for figures, each carrying the config
and package versions that made it. Every write goes to a temporary file in the same folder and is renamed
into place, so an interruption never leaves a half-written result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import importlib.metadata
import json
import math
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from countlens.core.errors import UsageError

_VERSIONED = ("countlens", "numpy", "scipy", "torch", "transformers", "datasets", "scikit-learn",
              "transformer-lens", "matplotlib")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages whose behaviour a result depends on (``None`` if absent)."""
    out = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The block every result file carries: config, versions, command line and UTC time."""
    return {
        "config": config or {},
        "versions": package_versions(),
        "command": " ".join(sys.argv),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/torch scalars and arrays, dataclasses and paths into plain JSON types.

    Non-finite floats become the strings ``"inf"``, ``"-inf"`` and ``"nan"`` so the file stays strict JSON.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # torch tensor, without importing torch here
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_target(path: str | os.PathLike) -> tuple[Path, str]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are for sharing like any written file
    return path, tmp


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path, tmp = _atomic_target(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented, strict JSON to ``path`` atomically (see :func:`to_jsonable`)."""
    return write_text_atomic(path, json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")


@contextlib.contextmanager
def locked(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive advisory lock on the lock file ``path`` (made if missing) while the block runs, where the
    platform has ``fcntl``; no lock elsewhere. Writers of one shared file (a cache entry, a results file) take it
    around their read-modify-write."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """Read a JSON file, turning a missing or malformed file into a :class:`UsageError`."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{what} {path} does not exist")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} {path} is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})") from None


def save_figure(fig: Any, stem: str | os.PathLike, formats: tuple[str, ...] = ("png", "pdf"), dpi: int = 150) -> list[Path]:
    """Save a matplotlib figure as ``stem.png`` and ``stem.pdf`` atomically; return the paths written."""
    import io

    import matplotlib.pyplot as plt

    written = []
    for fmt in formats:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight")
        written.append(write_bytes_atomic(f"{stem}.{fmt}", buf.getvalue()))
    plt.close(fig)
    return written


def write_csv_atomic(path: str | os.PathLike, header: list[str], rows: list[list[Any]]) -> Path:
    """Write a CSV file (one header line, then ``rows``) atomically."""
    import csv
    import io as _io

    buf = _io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return write_text_atomic(path, buf.getvalue())


def config_digest(config: Any, length: int = 20) -> str:
    """A short SHA-256 of ``config`` as canonical JSON (sorted keys): what keys a cached result."""
    import hashlib

    text = json.dumps(to_jsonable(config), sort_keys=True, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the disk that holds ``path`` (or will: its nearest existing parent)."""
    folder = Path(path).resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def size_text(n: float) -> str:
    """``n`` bytes as a short decimal size: ``"1.0 kB"``, ``"615.9 MB"``, ``"12 bytes"``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} bytes"


__all__ = ["free_bytes", "size_text", "package_versions", "provenance", "to_jsonable", "write_bytes_atomic", "write_text_atomic",
           "write_json_atomic", "write_csv_atomic", "read_json", "save_figure", "config_digest"]
