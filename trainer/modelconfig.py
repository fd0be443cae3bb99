"""A model's architecture without torch: the named configs, and a folder's config.json, bounded.

The trainer builds its model from these (trainer/models.py); ``submit`` reads the same
(daemon/run/spec.py) to refuse, before a run is queued, a config.json that is not one, a
``--seq-len`` past the model's positions, or a model the host cannot hold
(trainer/footprint.py). A config.json may come from anyone: it is read as a regular file of
at most ``MAX_CONFIG_BYTES``, and every size in it must be a whole number within its cap
(``LIMITS``), so a config claiming 10^12 layers is one line, never an allocation. Shared and
torch-free: the daemon imports it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import UsageError
from trainer.ownership import NotOurs, read_regular

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
CONFIG_NAME = "config.json"
#: A real config.json is a few KB; past this it is not one.
MAX_CONFIG_BYTES = 1 << 20
#: A named config's vocabulary is the tokenizer's trained on the run's text (trainer/data/batches.py
#: ``tokenizer_vocab``: 512 to this many) or the synthetic data's 128.
MAX_TRAINED_VOCAB = 4096

#: The largest value each size of a config.json may take: about ten times the largest
#: released decoder's (Llama-3.1-405B: 126 layers, hidden 16,384, MLP 53,248, 128 heads;
#: Gemma: a vocabulary of 256,000; Llama 4 Scout: 10M positions). Past them a file is a
#: mistake or an attack, and the arithmetic on it would run to absurd sizes.
LIMITS = {
    "num_hidden_layers": 1024,
    "hidden_size": 1 << 17,
    "intermediate_size": 1 << 20,
    "num_attention_heads": 1024,
    "num_key_value_heads": 1024,
    "head_dim": 1 << 14,
    "vocab_size": 1 << 22,
    "max_position_embeddings": 1 << 27,
}
#: What a config.json must say (``save_pretrained`` writes every one of them).
REQUIRED = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
            "vocab_size", "max_position_embeddings")


@dataclass(frozen=True)
class Architecture:
    """The sizes of a Llama or Qwen2 decoder that decide its parameters and positions."""

    family: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    positions: int  # max_position_embeddings: the longest sequence it takes
    tied: bool  # the head shares the embedding's weight
    attention_bias: bool  # llama's attention_bias: q, k, v and o carry biases
    mlp_bias: bool

    @property
    def params_per_layer(self) -> int:
        """Parameters of one decoder layer, as transformers builds it (checked against it in
        tests/trainer/test_trainer_models.py)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        norms = 2 * self.hidden
        biases = 0
        if self.family == "qwen2":  # q, k and v only
            biases += q + 2 * kv
        if self.attention_bias:
            biases += q + 2 * kv + self.hidden
        if self.mlp_bias:
            biases += 2 * self.intermediate + self.hidden
        return attention + mlp + norms + biases


def of_model(model: str) -> Architecture:
    """The architecture ``--model`` names: a named config, or a folder's config.json."""
    if model in NAMED:
        return named(model)
    return read(Path(model).expanduser())


def named(name: str, vocab: int = MAX_TRAINED_VOCAB) -> Architecture:
    family, kwargs = NAMED[name]
    return _architecture({"model_type": family, "vocab_size": vocab, **kwargs}, name)


def read(folder: Path) -> Architecture:
    """The architecture in ``folder/config.json``; UsageError, one line, for anything else."""
    return _architecture(read_values(folder), str(Path(folder) / CONFIG_NAME))


def read_values(folder: Path) -> dict:
    """``folder/config.json`` as a JSON object, read bounded; UsageError in one line when it
    is unreadable, not a regular file, too large, not UTF-8 JSON or not an object."""
    path = Path(folder) / CONFIG_NAME
    try:
        raw = read_regular(path, max_bytes=MAX_CONFIG_BYTES, what="config.json", follow=True)
        values = json.loads(raw)
    except NotOurs as exc:
        raise UsageError(f"model config {exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"model config {path}: not UTF-8 text") from None
    except ValueError as exc:
        raise UsageError(f"model config {path}: not JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"model config {path}: nested too deeply to be a config") from None
    if not isinstance(values, dict):
        raise UsageError(f"model config {path}: not a JSON object")
    return values


def _architecture(values: dict, where: str) -> Architecture:
    family = values.get("model_type")
    if family not in FAMILIES:
        raise UsageError(f"model config {where}: model_type {family!r} is not one of "
                         f"{', '.join(FAMILIES)}")
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise UsageError(f"model config {where}: no {', '.join(missing)}")
    size = {k: _size(values, k, where) for k in REQUIRED}
    heads = size["num_attention_heads"]
    kv_heads = _size(values, "num_key_value_heads", where, default=heads)
    if heads % kv_heads:
        raise UsageError(f"model config {where}: {heads} attention heads cannot share "
                         f"{kv_heads} key-value heads evenly")
    head_dim = values.get("head_dim")
    if head_dim is None:
        if size["hidden_size"] % heads:
            raise UsageError(f"model config {where}: hidden_size {size['hidden_size']} is not "
                             f"a multiple of {heads} attention heads")
        head_dim = size["hidden_size"] // heads
    else:
        head_dim = _size(values, "head_dim", where)
    return Architecture(
        family=family, layers=size["num_hidden_layers"], hidden=size["hidden_size"],
        intermediate=size["intermediate_size"], heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, vocab=size["vocab_size"],
        positions=size["max_position_embeddings"],
        tied=_flag(values, "tie_word_embeddings", where),
        attention_bias=family == "llama" and _flag(values, "attention_bias", where),
        mlp_bias=family == "llama" and _flag(values, "mlp_bias", where))


def _size(values: dict, key: str, where: str, default: int | None = None) -> int:
    value = values.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"model config {where}: {key} must be a whole number of 1 or more, "
                         f"got {_short(value)}")
    if value > LIMITS[key]:
        raise UsageError(f"model config {where}: {key} {_short(value)} is past any real "
                         f"model's (at most {LIMITS[key]:,})")
    return value


def _flag(values: dict, key: str, where: str) -> bool:
    value = values.get(key, False)
    if not isinstance(value, bool):
        raise UsageError(f"model config {where}: {key} must be true or false, "
                         f"got {_short(value)}")
    return value


def _short(value) -> str:
    """A value as one short line (a number of a million digits is not printed whole)."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 \
        else f"a number of about {int(value.bit_length() * 0.30103)} digits"
    return text if len(text) <= 60 else text[:57] + "..."
