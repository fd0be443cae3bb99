"""Models: named small configs, or a local transformers folder. No downloads.

A model is a transformers causal LM of the Llama or Qwen2 family. The engine
runs it piece by piece, so this module also names the pieces:

- ``embed``: ``model.model.embed_tokens``
- ``layers``: ``model.model.layers`` (the decoder layers, in order)
- ``norm`` and ``head``: ``model.model.norm`` and ``model.lm_head``
- ``rotary``: ``model.model.rotary_emb`` (buffers only, no parameters)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from trainer.errors import UsageError

# Named configs: (family, keyword arguments). ``vocab_size`` is filled in from
# the tokenizer (or the synthetic data's vocabulary) when the model is built.
NAMED = {
    # The demo and test model: 4 layers, hidden 64, grouped-query attention.
    "tiny-llama": ("llama", {
        "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    }),
    # Qwen2 family: q/k/v biases, tied embedding and head (as Qwen2-0.5B).
    "tiny-qwen2": ("qwen2", {
        "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
    }),
    # Llama-3.1-8B's layer structure scaled down: same 4:1 grouped-query
    # attention, MLP ratio 3.5, rope theta 500000 with llama3 rope scaling,
    # rms eps 1e-5, untied head; 8 layers of hidden 256 instead of 32 of 4096.
    "llama-3.1-8b-mini": ("llama", {
        "hidden_size": 256, "intermediate_size": 896, "num_hidden_layers": 8,
        "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    }),
}

FAMILIES = ("llama", "qwen2")


@dataclass
class ModelSpec:
    """What ``--model`` names: a small config, or a folder with config and weights."""

    name: str
    folder: Path | None  # None for a named config

    @property
    def layers(self) -> int:
        """Decoder layers, read from the config without building the model."""
        if self.folder is None:
            return NAMED[self.name][1]["num_hidden_layers"]
        import json

        return int(json.loads((self.folder / "config.json").read_text())["num_hidden_layers"])

    @property
    def has_tokenizer(self) -> bool:
        return self.folder is not None and any(
            (self.folder / f).exists() for f in ("tokenizer.json", "tokenizer.model")
        )


def resolve(name: str) -> ModelSpec:
    """A named config, or an existing folder with a config.json."""
    if name in NAMED:
        return ModelSpec(name, None)
    folder = Path(name).expanduser()
    if folder.is_dir() and (folder / "config.json").exists():
        return ModelSpec(name, folder)
    raise UsageError(
        f"unknown model {name!r}: give one of {', '.join(NAMED)} or a folder with config.json"
    )


def build(spec: ModelSpec, vocab_size: int | None, seed: int) -> nn.Module:
    """The model in fp32 on the host, initialised from ``seed`` (named) or loaded."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    if spec.folder is not None:
        model = AutoModelForCausalLM.from_pretrained(
            spec.folder, dtype=torch.float32, attn_implementation="eager"
        )
        family = model.config.model_type
        if family not in FAMILIES:
            raise UsageError(f"model type {family!r} in {spec.folder} is not one of {FAMILIES}")
    else:
        family, kwargs = NAMED[spec.name]
        cls = LlamaConfig if family == "llama" else Qwen2Config
        config = cls(vocab_size=vocab_size or 512, attn_implementation="eager", **kwargs)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config.use_cache = False
    model.train()
    return model


def skeleton(spec: ModelSpec, vocab_size: int | None, lora: int) -> nn.Module:
    """The model's modules and parameter shapes on the meta device: no memory, no weights
    read, torch's random state untouched. What a checkpoint is checked against."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        if spec.folder is not None:
            config = AutoConfig.from_pretrained(spec.folder)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        else:
            model = build(spec, vocab_size, seed=0)
        if lora:
            add_lora(model, lora)
    return model


def num_layers(model: nn.Module) -> int:
    return len(model.model.layers)


def params_per_layer(model: nn.Module) -> int:
    return sum(p.numel() for p in model.model.layers[0].parameters())


def is_tied(model: nn.Module) -> bool:
    return model.lm_head.weight is model.model.embed_tokens.weight


def decays(name: str, param: nn.Parameter) -> bool:
    """Weight decay applies to matrices (projections, embedding, head), not to norms or biases."""
    return param.dim() >= 2


def add_lora(model: nn.Module, rank: int, alpha: float | None = None, seed: int = 0) -> None:
    """Freeze every base weight and add LoRA adapters to the attention and MLP projections."""
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed + 1)
    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name in targets:
                base = getattr(parent, name, None)
                if isinstance(base, nn.Linear):
                    setattr(parent, name, LoRALinear(base, rank, alpha or 2.0 * rank, gen))


class LoRALinear(nn.Module):
    """``base(x) + scale * B(A(x))``; A is random, B starts at zero, base is frozen."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, gen: torch.Generator):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        a = torch.empty(rank, base.in_features)
        nn.init.kaiming_uniform_(a, a=5 ** 0.5, generator=gen)
        self.lora_a = nn.Parameter(a)
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale
