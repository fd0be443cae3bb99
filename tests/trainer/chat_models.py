"""A small model folder whose tokenizer has a chat template like Llama 3's, built offline."""

from __future__ import annotations

import json
from pathlib import Path

#: Meta-Llama-3-8B-Instruct's chat template, as its tokenizer_config.json has it.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>"]
WORDS = ["hello there how are you", "I am fine thanks", "what is the weather today",
         "be brief and kind", "the answer is forty two", "tell me a story about a cat",
         "system user assistant", "영화 정말 재미있어요", "최악의 영화"]


def llama3_tokenizer(template: str | None = LLAMA3_TEMPLATE, vocab: int = 400):
    """A byte-level BPE with Llama 3's special tokens and (unless None) its chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(WORDS * 20, trainer=trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|begin_of_text|>",
                                  eos_token="<|eot_id|>", pad_token="<|end_of_text|>")
    if template is not None:
        tok.chat_template = template
    return tok


def chat_model_folder(parent: Path, template: str | None = LLAMA3_TEMPLATE,
                      name: str = "chat-model") -> Path:
    """A 2-layer Llama with that tokenizer, saved as a model folder (weights included)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = llama3_tokenizer(template)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, attn_implementation="eager",
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder = Path(parent) / name
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def write_jsonl(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects),
                    encoding="utf-8")
    return path
