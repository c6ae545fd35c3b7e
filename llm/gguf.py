"""GGUF files: the facts a check needs, read from the header in a fraction of a second, and every slow
conversion done once and cached.

**The header.** A GGUF file starts with its key/value metadata and its tensor table, written one after the
other; the big values are arrays (the vocabulary ``tokenizer.ggml.tokens``, its ``token_type`` and
``scores``, the BPE ``merges``: hundreds of thousands of entries). :func:`read_header` walks the header
once, keeping every scalar and short array and, for a long array, only its type, length and place in the
file (a fixed-width array is skipped by its length, a string array by its strings' lengths), so the
architecture, context length, number of blocks, chat template (or its absence) and special tokens of a
262k-token vocabulary are read in well under a second — where ``gguf.GGUFReader`` builds a numpy view per
vocabulary entry (tens of seconds) and transformers then converts the vocabulary to a fast tokenizer.

**The cache** (:class:`GGUFCache`). What transformers makes from a GGUF file — the fast tokenizer and model
config (``tokenizer/``), the dequantised float32 weights (``weights/``, a complete Hugging Face model folder)
— is kept under ``cache_root()/gguf/<stem>-<key>/``, where the key digests the file's identity: its resolved
path, size, modification and status-change times, the SHA-256 of its header, and the transformers version that
converted it. A changed file has another key, so it is never served a stale entry (and the stale entries of
the same path are removed when the new one is written). Each part is written into a temporary folder renamed
into place, under a lock, so an interrupted run or two processes converting at once never leave a half-written
part; the weights are cached only when the disk has room for them (else one line says so and the file is
dequantised on every load).
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.io import free_bytes, locked, size_text, write_json_atomic

# GGUF metadata value types (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_WIDTH = {k: struct.calcsize(v) for k, v in _SCALAR.items()}
SHORT_ARRAY = 1024  # arrays up to this many entries are read; longer ones are only located
TOKEN_ID_KEYS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
                 "pad_token": "padding_token_id"}
FORMAT = 1  # the cache layout; a new layout gets new keys


class GGUFError(ValueError):
    """A file that is not a readable GGUF file."""


@dataclass(frozen=True)
class GGUFArray:
    """A long metadata array that was located, not read: its element type, length and byte offset."""

    type: int
    count: int
    offset: int


@dataclass(frozen=True)
class GGUFTensor:
    """One entry of the tensor table: name, shape (torch order) and ggml type."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GGUFHeader:
    """A GGUF file's header: ``metadata`` (every scalar and short array), ``arrays`` (the long arrays,
    located only), ``tensors`` (the tensor table), ``header_bytes`` (metadata and table together) and
    ``sha256`` (of those bytes), and the special tokens' strings (``bos_token`` ... looked up in the
    vocabulary by their ids)."""

    path: str
    version: int
    metadata: dict[str, Any]
    arrays: dict[str, GGUFArray]
    tensors: tuple[GGUFTensor, ...]
    header_bytes: int
    sha256: str
    special_tokens: dict[str, str | None] = field(default_factory=dict)

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    def arch_value(self, key: str) -> Any:
        """``<architecture>.<key>`` (``context_length``, ``block_count``, ...), if the file says."""
        return self.metadata.get(f"{self.architecture}.{key}")

    @property
    def context_length(self) -> int | None:
        return self.arch_value("context_length")

    @property
    def block_count(self) -> int | None:
        return self.arch_value("block_count")

    @property
    def chat_template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template") or None

    @property
    def vocab_size(self) -> int | None:
        tokens = self.arrays.get("tokenizer.ggml.tokens")
        if tokens is not None:
            return tokens.count
        listed = self.metadata.get("tokenizer.ggml.tokens")
        return len(listed) if isinstance(listed, list) else self.arch_value("vocab_size")

    @property
    def n_parameters(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    def facts(self) -> dict[str, Any]:
        """What a check before loading needs, as one record."""
        return {"architecture": self.architecture, "context_length": self.context_length,
                "block_count": self.block_count, "has_chat_template": self.chat_template is not None,
                "special_tokens": dict(self.special_tokens), "vocab_size": self.vocab_size,
                "n_tensors": len(self.tensors), "n_parameters": self.n_parameters}


class _Cursor:
    """Sequential reads from the mapped file (``order``: ``<`` or ``>``)."""

    def __init__(self, buf, order: str = "<"):
        self.buf, self.pos, self.order = buf, 0, order

    def unpack(self, fmt: str):
        values = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += struct.calcsize(self.order + fmt)
        return values

    def scalar(self, kind: int):
        return self.unpack(_SCALAR[kind])[0]

    def string(self) -> str:
        (n,) = self.unpack("Q")
        start, self.pos = self.pos, self.pos + n
        if self.pos > len(self.buf):
            raise GGUFError("a string runs past the end of the file")
        return bytes(self.buf[start:self.pos]).decode("utf-8", errors="replace")

    def skip_strings(self, count: int, keep: set[int]) -> dict[int, str]:
        """Step over ``count`` strings (by their lengths), keeping those at the indices ``keep``."""
        kept, buf, pos, order = {}, self.buf, self.pos, self.order + "Q"
        unpack = struct.unpack_from
        for i in range(count):
            (n,) = unpack(order, buf, pos)
            if i in keep:
                kept[i] = bytes(buf[pos + 8:pos + 8 + n]).decode("utf-8", errors="replace")
            pos += 8 + n
        if pos > len(buf):
            raise GGUFError("an array runs past the end of the file")
        self.pos = pos
        return kept

    def value(self, kind: int, key: str, arrays: dict[str, GGUFArray]):
        if kind in _SCALAR:
            return self.scalar(kind)
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise GGUFError(f"metadata key {key!r} has an unknown value type {kind}")
        elem, count = self.unpack("IQ")
        if count <= SHORT_ARRAY:
            return [self.value(elem, key, arrays) for _ in range(count)]
        arrays[key] = GGUFArray(elem, count, self.pos)
        if elem in _SCALAR:
            self.pos += count * _WIDTH[elem]
        elif elem == _STRING:
            self.skip_strings(count, set())
        else:  # an array of arrays: walk it
            for _ in range(count):
                self.value(elem, key, {})
        return None


def read_header(path: str | os.PathLike) -> GGUFHeader:
    """The header of the GGUF file ``path`` (:class:`GGUFHeader`), reading the long arrays only as far as
    their lengths; :class:`GGUFError` for a file that is not GGUF."""
    path = str(path)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 24:
            raise GGUFError(f"{path} is not a GGUF file ({size} bytes)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(path, buf)


def _parse(path: str, buf) -> GGUFHeader:
    if bytes(buf[:4]) != b"GGUF":
        raise GGUFError(f"{path} is not a GGUF file (it does not start with the bytes GGUF)")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = "<" if version & 0xFFFF else ">"  # a big-endian file's version reads byte-swapped
    cur = _Cursor(buf, order)
    cur.pos = 4
    (version,) = cur.unpack("I")
    if version not in (2, 3):
        raise GGUFError(f"{path} is GGUF version {version}; versions 2 and 3 are read")
    try:
        n_tensors, n_kv = cur.unpack("QQ")
        metadata: dict[str, Any] = {}
        arrays: dict[str, GGUFArray] = {}
        for _ in range(n_kv):
            key = cur.string()
            (kind,) = cur.unpack("I")
            value = cur.value(kind, key, arrays)
            if key not in arrays:
                metadata[key] = value
        tensors = []
        for _ in range(n_tensors):
            name = cur.string()
            (n_dims,) = cur.unpack("I")
            dims = cur.unpack(f"{n_dims}Q")
            ggml_type, _offset = cur.unpack("IQ")
            tensors.append(GGUFTensor(name, tuple(reversed(dims)), ggml_type))
    except struct.error:
        raise GGUFError(f"{path} ends inside its header (a truncated GGUF file)") from None
    end = cur.pos
    special = _special_tokens(cur, metadata, arrays)
    digest = hashlib.sha256(buf[:end]).hexdigest()
    return GGUFHeader(path, version, metadata, arrays, tuple(tensors), end, digest, special)


def _special_tokens(cur: _Cursor, metadata: dict[str, Any], arrays: dict[str, GGUFArray]) -> dict[str, str | None]:
    """The strings of the special tokens whose ids the metadata names."""
    ids = {name: metadata.get(f"tokenizer.ggml.{key}") for name, key in TOKEN_ID_KEYS.items()}
    wanted = {int(i) for i in ids.values() if isinstance(i, int)}
    tokens = arrays.get("tokenizer.ggml.tokens")
    if tokens is not None and tokens.type == _STRING and wanted:
        cur.pos = tokens.offset
        found = cur.skip_strings(min(tokens.count, max(wanted) + 1), wanted)
    else:
        listed = metadata.get("tokenizer.ggml.tokens") or []
        found = {i: listed[i] for i in wanted if i < len(listed)}
    return {name: (found.get(int(i)) if isinstance(i, int) else None) for name, i in ids.items()}


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of the whole file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- the cache

TOKENIZER_PART = "tokenizer"  # the fast tokenizer and config.json: what a check before loading needs
WEIGHTS_PART = "weights"  # a complete Hugging Face folder with the dequantised float32 weights
SOURCE_FILE = "source.json"


def file_identity(path: str | os.PathLike, header: GGUFHeader) -> dict[str, Any]:
    """What keys a file's cache entry: resolved path, size, modification and status-change times (ns),
    header SHA-256, the transformers version that converts it and the cache layout.

    The status-change time (``st_ctime_ns``) is there because the modification time can be set back: a file
    replaced under its old size and modification time (``cp -p``, ``rsync -t``, ``touch -r``, a restored
    backup) would otherwise be served its predecessor's weights; no program sets the status-change time, and
    every write, rename into place or ``utime`` moves it (a ``chmod`` too: one needless conversion)."""
    import importlib.metadata

    resolved = Path(path).resolve()
    stat = resolved.stat()
    try:
        converter = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        converter = None
    return {"path": str(resolved), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
            "ctime_ns": stat.st_ctime_ns, "header_sha256": header.sha256, "transformers": converter,
            "format": FORMAT}


def identity_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def _write_folder(target: Path, fill) -> Path:
    """Fill a temporary folder beside ``target`` (``fill(folder)``) and rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes 0700; a cache is as shareable as any folder made here
        fill(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _say(text: str) -> None:
    print(f"countlens: {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class GGUFCache:
    """The cache entry of one GGUF file (see the module docstring): ``folder`` holds ``source.json``
    (the file's identity and its SHA-256), ``tokenizer/`` and ``weights/``, each made on first need."""

    gguf: str
    folder: str
    identity: dict[str, Any]

    @classmethod
    def of(cls, gguf: str | os.PathLike, header: GGUFHeader, root: str | os.PathLike) -> GGUFCache:
        identity = file_identity(gguf, header)
        stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in Path(gguf).stem)[:48] or "model"
        return cls(str(Path(gguf).resolve()), str(Path(root) / "gguf" / f"{stem}-{identity_key(identity)}"),
                   identity)

    @property
    def path(self) -> Path:
        return Path(self.folder)

    def part(self, name: str) -> Path | None:
        """The finished part ``name`` (``tokenizer`` or ``weights``), or ``None``."""
        folder = self.path / name
        return folder if (folder / "config.json").is_file() else None

    def source(self) -> dict[str, Any]:
        """The entry's ``source.json`` (identity and the file's SHA-256), written on first use."""
        path = self.path / SOURCE_FILE
        try:
            record = json.loads(path.read_text())
            if record.get("identity") == self.identity and record.get("sha256"):
                return record
        except (OSError, ValueError):
            pass
        record = {"identity": self.identity, "sha256": file_sha256(self.gguf)}
        if self.writable():
            with locked(self.path / ".lock"):
                write_json_atomic(path, record)
                self._remove_stale()
        return record

    def writable(self) -> bool:
        """Whether the entry's folder exists or can be made (a read-only cache is used as no cache)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        return os.access(self.path, os.W_OK)

    def _remove_stale(self) -> None:
        """Remove the entries of the same path made from other contents (the file changed since); entries
        of the same contents made by another transformers version are left to it."""
        facts = ("size", "mtime_ns", "ctime_ns", "header_sha256")
        for other in self.path.parent.glob("*/" + SOURCE_FILE):
            if other.parent == self.path:
                continue
            try:
                identity = json.loads(other.read_text()).get("identity", {})
            except (OSError, ValueError):
                continue
            if (identity.get("path") == self.identity["path"]
                    and any(identity.get(f) != self.identity[f] for f in facts)):
                shutil.rmtree(other.parent, ignore_errors=True)

    def make(self, name: str, fill, need_bytes: int, what: str, doing: str, progress: bool = True) -> Path | None:
        """The part ``name``, made by ``fill(folder)`` if missing: ``what`` names it in a refusal, ``doing``
        announces the conversion (when ``progress``). Returns ``None``, having said why in one line, when
        the disk lacks ``need_bytes`` or the cache folder cannot be written."""
        done = self.part(name)
        if done is not None:
            return done
        if not self.writable():
            _say(f"not caching {what} of {Path(self.gguf).name}: cannot write to {self.path.parent}, so every "
                 "load converts it again (set COUNTLENS_CACHE to a writable folder, or pass --no-cache)")
            return None
        self.source()
        with locked(self.path / ".lock"):
            done = self.part(name)  # another process may have made it meanwhile
            if done is not None:
                return done
            free = free_bytes(self.path)
            if free < need_bytes:
                _say(f"not caching {what} of {Path(self.gguf).name}: it needs {size_text(need_bytes)} and "
                     f"{self.path.parent} has {size_text(free)} free, so every load converts it again (free "
                     "space, set COUNTLENS_CACHE to another folder, or pass --no-cache)")
                return None
            if progress:
                _say(f"{doing}; caching it in {self.path / name}")
            return _write_folder(self.path / name, fill)


def tokenizer_bytes(header: GGUFHeader) -> int:
    """Room for the tokenizer part: a few times the header (the vocabulary as JSON), plus a margin."""
    return 4 * header.header_bytes + (16 << 20)


def weights_bytes(header: GGUFHeader) -> int:
    """Room for the weights part: every tensor in float32, plus a margin."""
    return int(header.n_parameters * 4 * 1.02) + (64 << 20)


__all__ = ["GGUFError", "GGUFArray", "GGUFTensor", "GGUFHeader", "read_header", "file_sha256", "GGUFCache",
           "file_identity", "identity_key", "tokenizer_bytes", "weights_bytes",
           "TOKENIZER_PART", "WEIGHTS_PART"]
