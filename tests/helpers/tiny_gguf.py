"""Tiny GGUF files written with the ``gguf`` package's ``GGUFWriter``: a random Llama-architecture model (two
blocks, width 64, weights Q8_0 so that loading dequantises) with a byte-level BPE vocabulary, a ChatML chat
template or none, and optionally a large vocabulary (``extra_tokens`` merged tokens, each with its merge
rule, as a real 200k-token vocabulary has) — what the GGUF cache and the header reader are tested and
benchmarked on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
WORDS = (" a", " b", " x", " o", " cat", " dog", " red", " blue", " Count", " the", " How", " many", " are",
         " there", " in", " list", " Answer", " with", " number", " only", " words")


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 base tokens of a byte-level BPE vocabulary."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs, strict=True))]


def byte_level_vocab(extra_tokens: int = 0, seed: int = 0) -> tuple[list[str], list[str]]:
    """(tokens, merges): the 256 byte tokens, the merges spelling :data:`WORDS`, ``extra_tokens`` more
    tokens each merged from two earlier ones, and the special tokens last."""
    chars = _byte_chars()
    table = {bytes([b]).decode("latin-1"): chars[b] for b in range(256)}
    tokens, merges, known = list(chars), [], set(chars)

    def add(left: str, right: str) -> None:
        merged = left + right
        if merged not in known:
            merges.append(f"{left} {right}")
            tokens.append(merged)
            known.add(merged)

    for word in WORDS:
        pieces = [table[c] for c in word]
        acc = pieces[0]
        for piece in pieces[1:]:
            add(acc, piece)
            acc += piece
    rng = np.random.default_rng(seed)
    base = len(tokens)
    while len(tokens) < base + extra_tokens:
        left, right = tokens[int(rng.integers(0, len(tokens)))], tokens[int(rng.integers(0, 256))]
        if len(left) + len(right) <= 12:
            add(left, right)
    return tokens + list(SPECIALS), merges


def _add_tokenizer(writer, tokens: list[str], merges: list[str], chat_template: str | None) -> None:
    """The GGUF tokenizer keys: a byte-level BPE vocabulary, ChatML's specials, the chat template if any."""
    import gguf

    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|im_end|>"))
    writer.add_unk_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def write_tiny_gguf(path: str | Path, chat_template: str | None = CHATML, extra_tokens: int = 0, seed: int = 0,
                    n_blocks: int = 2, d: int = 64, context: int = 512) -> Path:
    """Write a tiny random Llama GGUF model to ``path`` (see the module docstring); returns ``path``."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, merges = byte_level_vocab(extra_tokens, seed)
    n_vocab, n_heads, n_kv, ff = len(tokens), 4, 2, 2 * d
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-gguf")
    writer.add_context_length(context)
    writer.add_embedding_length(d)
    writer.add_block_count(n_blocks)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_dimension_count(d // n_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    _add_tokenizer(writer, tokens, merges, chat_template)
    rng = np.random.default_rng(seed)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
        q8 = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, q8, raw_shape=q8.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def vector(name: str, n: int) -> None:
        writer.add_tensor(name, (1 + 0.05 * rng.standard_normal(n)).astype(np.float32))

    hd = d // n_heads
    matrix("token_embd.weight", n_vocab, d)
    for b in range(n_blocks):
        vector(f"blk.{b}.attn_norm.weight", d)
        matrix(f"blk.{b}.attn_q.weight", d, d)
        matrix(f"blk.{b}.attn_k.weight", n_kv * hd, d)
        matrix(f"blk.{b}.attn_v.weight", n_kv * hd, d)
        matrix(f"blk.{b}.attn_output.weight", d, d)
        vector(f"blk.{b}.ffn_norm.weight", d)
        matrix(f"blk.{b}.ffn_gate.weight", ff, d)
        matrix(f"blk.{b}.ffn_up.weight", ff, d)
        matrix(f"blk.{b}.ffn_down.weight", d, ff)
    vector("output_norm.weight", d)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


__all__ = ["CHATML", "byte_level_vocab", "write_tiny_gguf"]
