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

from trainer import modelconfig
from trainer.errors import UsageError

#: The named configs and the families the trainer builds: torch-free, so `submit` reads them too.
NAMED, FAMILIES = modelconfig.NAMED, modelconfig.FAMILIES


@dataclass
class ModelSpec:
    """What ``--model`` names: a small config, or a folder with config and weights."""

    name: str
    folder: Path | None  # None for a named config
    #: Its sizes, read without building it (a folder's config.json checked and bounded).
    architecture: modelconfig.Architecture

    @property
    def layers(self) -> int:
        """Decoder layers, read from the config without building the model."""
        return self.architecture.layers

    @property
    def has_tokenizer(self) -> bool:
        return self.folder is not None and any(
            (self.folder / f).exists() for f in ("tokenizer.json", "tokenizer.model")
        )


def resolve(name: str) -> ModelSpec:
    """A named config, or an existing folder with a valid config.json (UsageError, one line,
    for a folder that cannot be read or a config.json that is not one)."""
    if name in NAMED:
        return ModelSpec(name, None, modelconfig.named(name))
    folder = Path(name).expanduser()
    try:
        found = folder.is_dir() and (folder / modelconfig.CONFIG_NAME).exists()
    except OSError as exc:  # a folder above it this user cannot search
        raise UsageError(f"--model {name}: {exc.strerror}") from None
    if not found:
        raise UsageError(
            f"unknown model {name!r}: give one of {', '.join(NAMED)} or a folder with "
            f"config.json")
    return ModelSpec(name, folder, modelconfig.read(folder))


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
