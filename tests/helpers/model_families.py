"""Tiny random chat models of many families, each with its family's chat-template behaviour and a vocabulary
of its family's kind, for the conformance matrix.

Tokenizers are small BPE vocabularies trained here with ``tokenizers`` on counting-prompt text, in three
pre-tokenizer styles that real families use:

- ``gpt4``: byte-level with the GPT-4 / Llama-3 / Qwen2 split regex, which keeps punctuation with the
  newlines after it (``":\\n"`` is one token) — the vocabulary that broke the old item check;
- ``gpt2``: byte-level with GPT-2's regex (GPT-2, GPT-NeoX / Pythia);
- ``metaspace``: SentencePiece-like ``▁`` pieces with newlines isolated (Llama-2, Mistral, Phi-3, Gemma).

The chat templates are Jinja strings written after each family's real one: generation prompts ending in
``<|im_start|>assistant\\n``, ``<start_of_turn>model\\n``, ``<|start_header_id|>assistant<|end_header_id|>\\n\\n``,
``<|assistant|>\\n``, `` [/INST]``; default system prompts (Qwen2.5, Llama-3); templates that reject a system
role (Gemma-2, Mistral); none at all (GPT-2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

QWEN25 = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN3 = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
LLAMA3 = (
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: 26 Jul 2024\\n\\n' }}{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)
GEMMA3 = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
    "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)
OLMO2 = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + "
    "message['content'] + '\\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}"
)
PYTHIA_OASST = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|prompter|>' + message['content'] + "
    "'<|endoftext|>' }}{% elif message['role'] == 'assistant' %}{{ '<|assistant|>' + message['content'] + "
    "'<|endoftext|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

# GPT-4 / Llama-3 / Qwen2 pre-tokenizer split: `` ?[^\s\p{L}\p{N}]+[\r\n]*`` keeps ``":\n"`` together.
GPT4_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class Family:
    """One row of the conformance matrix: a ``transformers`` architecture, a vocabulary style, a template."""

    name: str
    arch: str
    style: str  # gpt4, gpt2, metaspace, or smollm2 (the real SmolLM2 tokenizer)
    template: str | None
    ending: str  # the text every rendered prompt ends with
    bos: str | None = None
    eos: str = "<|endoftext|>"
    specials: tuple[str, ...] = field(default=())
    rejects_system: bool = False


FAMILIES = (
    Family("llama-3", "llama", "gpt4", LLAMA3, "<|start_header_id|>assistant<|end_header_id|>\n\n",
           bos="<|begin_of_text|>", eos="<|eot_id|>", specials=("<|start_header_id|>", "<|end_header_id|>")),
    Family("qwen2", "qwen2", "gpt4", QWEN25, "<|im_start|>assistant\n", eos="<|im_end|>",
           specials=("<|im_start|>",)),
    Family("qwen3", "qwen3", "gpt4", QWEN3, "<|im_start|>assistant\n", eos="<|im_end|>", specials=("<|im_start|>",)),
    Family("gemma-2", "gemma2", "metaspace", GEMMA2, "<start_of_turn>model\n", bos="<bos>", eos="<eos>",
           specials=("<start_of_turn>", "<end_of_turn>"), rejects_system=True),
    Family("gemma-3", "gemma3_text", "metaspace", GEMMA3, "<start_of_turn>model\n", bos="<bos>", eos="<eos>",
           specials=("<start_of_turn>", "<end_of_turn>")),
    Family("mistral", "mistral", "metaspace", MISTRAL, " [/INST]", bos="<s>", eos="</s>", rejects_system=True),
    Family("phi-3", "phi3", "metaspace", PHI3, "<|assistant|>\n", bos="<s>", eos="<|endoftext|>",
           specials=("<|user|>", "<|assistant|>", "<|end|>", "<|system|>")),
    Family("gpt-2", "gpt2", "gpt2", None, "\nAnswer:"),
    Family("gpt-neox", "gpt_neox", "gpt2", PYTHIA_OASST, "<|assistant|>", specials=("<|prompter|>", "<|assistant|>")),
    Family("olmo-2", "olmo2", "gpt4", OLMO2, "<|assistant|>\n",
           bos="<|endoftext|>", specials=("<|user|>", "<|assistant|>", "<|system|>")),
    Family("smollm2", "llama", "smollm2", "", "<|im_start|>assistant\n"),
)
BY_NAME = {f.name: f for f in FAMILIES}


def corpus() -> list[str]:
    """Counting-prompt text to train the tiny vocabularies on: every wording with every candidate pair, with
    no, few and many items, so that each item (with its leading space) becomes one token and ``":\\n"``
    (the zero-item wordings) merges in the ``gpt4`` style."""
    from countlens.llm.prompts import CANDIDATE_PAIRS, CONFIGURATIONS, PLAIN_TEMPLATE, instruction_parts

    rng = np.random.default_rng(0)
    texts = []
    for config in CONFIGURATIONS:
        for pair in CANDIDATE_PAIRS:
            for size in (0, 0, 1, 3, 8, 20):
                items = rng.integers(0, 2, size=size).astype(np.int8)
                text, _ = instruction_parts(config, pair, items)
                texts.append(PLAIN_TEMPLATE.format(instruction=text))
    texts += ["You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
              "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n", "system user assistant model",
              "[INST] [/INST]"] * 5
    return texts


def train_tokenizer(style: str, specials: list[str], vocab_size: int = 600):
    """A BPE ``tokenizers.Tokenizer`` of ``style`` (``gpt4``, ``gpt2``, ``metaspace``) trained on :func:`corpus`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    if style == "metaspace":
        tok = Tokenizer(models.BPE(byte_fallback=False, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\n", behavior="isolated"),
                                                     pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")])
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
        alphabet = []
        specials = ["<unk>", *specials]
    else:
        tok = Tokenizer(models.BPE())
        if style == "gpt4":
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(GPT4_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        else:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


def family_tokenizer(family: Family, smollm2_dir: Path | None = None):
    """The tokenizer of ``family`` (a ``transformers`` fast tokenizer) with its chat template."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if family.style == "smollm2":
        return AutoTokenizer.from_pretrained(str(smollm2_dir))
    specials = list(dict.fromkeys([t for t in (family.bos, family.eos, "<pad>") if t] + list(family.specials)))
    tok = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(family.style, specials), bos_token=family.bos,
                                  eos_token=family.eos, pad_token="<pad>")
    tok.chat_template = family.template
    return tok


def build_family_model(path: str | Path, family: Family, seed: int = 0, smollm2_dir: Path | None = None) -> Path:
    """Save a tiny random model of ``family`` (config + safetensors + tokenizer with chat template) at ``path``."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.helpers.tiny_models import tiny_config

    path = Path(path)
    tok = family_tokenizer(family, smollm2_dir)
    ids = {k: tok.convert_tokens_to_ids(t) if t else None for k, t in
           (("bos", tok.bos_token), ("eos", tok.eos_token), ("pad", tok.pad_token))}
    config = tiny_config(family.arch, len(tok), ids["bos"] if ids["bos"] is not None else ids["eos"], ids["eos"],
                         ids["pad"] if ids["pad"] is not None else ids["eos"])
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(20.0)  # see tiny_models.build_tiny_chat_model
    model.eval().save_pretrained(str(path))
    tok.save_pretrained(str(path))
    if family.template is None:  # a family without a chat template: make sure none is saved
        (path / "chat_template.jinja").unlink(missing_ok=True)
    return path

