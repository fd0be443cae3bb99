"""The run's result: the fine-tuned model as a folder transformers or PEFT loads.

``--out DIR`` gets, at the end of the run:

- full fine-tuning (or ``--lora R --merge``): ``config.json``,
  ``generation_config.json``, ``model.safetensors`` (past 5 GB:
  ``model-0000K-of-0000N.safetensors`` and ``model.safetensors.index.json``,
  as transformers shards), the tokenizer's files when the run has a
  tokenizer; ``AutoModelForCausalLM.from_pretrained(DIR)`` loads it.
- ``--lora R``: a PEFT adapter, ``adapter_config.json`` and
  ``adapter_model.safetensors``; ``PeftModel.from_pretrained(base, DIR)``
  loads it onto the base model. A named model (tiny-llama, ...) exists
  nowhere else, so its untrained base is written beside it, in ``DIR/base``.
- always ``rngdctl.json``, last: the owner (the run and its home), the step,
  the data, the seed, the format, the sha256 of every weights file
  (``files``) and every name the save wrote (``written``).

``rngdctl.json`` is the folder's claim from the trainer's start
(trainer/ownership.py): it is rewritten, never removed. The save touches
only what this run wrote: it replaces or removes a name only when this run's
own ``rngdctl.json`` lists it from an earlier save, and refuses any other
file in the way (and a ``base`` folder it did not write) in one line.

Weights are written from where the masters live, one tensor at a time
(trainer/output/weights.py): an offloaded layer's master is written from host
memory as it is, a card's tensor in pieces of 16 MB. Each file is written
under a temporary name and renamed into place; ``rngdctl.json`` names no file
while they move and names them after all of them, so a folder whose
``rngdctl.json`` names a file holds it whole.

The weights are not fsynced, as transformers' ``save_pretrained`` does not:
the operating system writes them back within seconds, and forcing it would
double a small save's time (docs/performance.md). What must survive a crash
is the checkpoint, which is fsynced (trainer/output/checkpoint.py); a model torn by
a crash shows as a sha256 that differs from ``rngdctl.json``'s.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from trainer import ownership
from trainer.models import LoRALinear
from trainer.output import weights
from trainer.output.weights import Entry
from trainer.ownership import Owner

INFO_NAME = ownership.CLAIM_NAME
#: Where a named model's untrained base goes, inside its adapter's folder.
BASE_NAME = "base"
FULL, PEFT, MERGED = "full", "peft", "merged"
#: The modules LoRA adapts (trainer/models.py add_lora), as PEFT's target_modules.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class Saved:
    path: Path
    format: str
    files: dict[str, str] = field(default_factory=dict)  # weights file -> sha256
    bytes: int = 0
    seconds: float = 0.0


# === which tensors ===========================================================


def full_entries(model: nn.Module) -> list[Entry]:
    """Every weight by its transformers name, each shared tensor once (a tied head): the
    tensors ``save_pretrained`` of the base architecture writes.

    A LoRA-wrapped model gives its base weights under the base model's names, and
    not its adapters (those are the adapter's file, or folded in by a merge).
    """
    lora = {name for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    entries, seen = [], set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        module, _, leaf = name.rpartition(".")
        if module in lora and leaf in ("lora_a", "lora_b"):
            continue
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.device)
        if key in seen:
            continue  # the tied head: transformers ties it back on load
        seen.add(key)
        entries.append(Entry.of(_base_name(name, lora), tensor.data))
    return entries


def _base_name(name: str, lora: set[str]) -> str:
    """``...q_proj.base.weight`` of a LoRA-wrapped projection as the base model names it."""
    module, _, leaf = name.rpartition(".")
    parent, _, last = module.rpartition(".")
    if last == "base" and parent in lora:
        return f"{parent}.{leaf}"
    return name


def merged_entries(model: nn.Module) -> list[Entry]:
    """Full weights with every LoRA adapter folded in: W + scale * B A, made when written."""
    lora = {f"{name}.weight": m for name, m in model.named_modules()
            if isinstance(m, LoRALinear)}
    entries = []
    for e in full_entries(model):
        module = lora.get(e.name)
        if module is None:
            entries.append(e)
            continue

        def merged(m=module):
            # One new tensor: addmm writes scale * B A + W straight into it, no product apart.
            w = m.base.weight.detach()
            return torch.addmm(w, m.lora_b.detach().to(w.device), m.lora_a.detach().to(w.device),
                               alpha=m.scale)
        entries.append(Entry(e.name, e.shape, e.dtype, merged))
    return entries


def adapter_entries(model: nn.Module) -> list[Entry]:
    """The LoRA matrices under PEFT's names (``base_model.model.<module>.lora_A.weight``)."""
    entries = []
    for name, m in model.named_modules():
        if isinstance(m, LoRALinear):
            entries.append(Entry.of(f"base_model.model.{name}.lora_A.weight", m.lora_a.data))
            entries.append(Entry.of(f"base_model.model.{name}.lora_B.weight", m.lora_b.data))
    return entries


def lora_rank_alpha(model: nn.Module) -> tuple[int, float] | None:
    for m in model.modules():
        if isinstance(m, LoRALinear):
            rank = m.lora_a.shape[0]
            return rank, m.scale * rank
    return None


# === writing =================================================================


def save(out: Path, model: nn.Module, *, info: dict, owner: Owner,
         mode: int = ownership.DEFAULT_MODE, tokenizer=None, merge: bool = False,
         base_folder: Path | None = None, max_shard_bytes: int = weights.MAX_SHARD_BYTES,
         ) -> Saved:
    """Write the model's output folder (see the module's docstring); returns what was written.

    ``owner``: the run the folder belongs to (claimed here if the trainer has not
    already: ``ownership.check_output`` refuses another's). Only names this run
    wrote are replaced or removed; any other file in the way is refused
    (NotOurs), never overwritten. ``mode``: the folder's, its files' the same
    less execute. ``base_folder``: for an adapter, the folder its base model was
    read from (None: a named model, whose base is written to ``out/base``).
    """
    t0 = time.perf_counter()
    out = Path(out)
    ownership.check_output(out, owner)
    ownership.claim(out, owner, mode=mode)
    claim = ownership.read_info(out / INFO_NAME)
    ours = _written_before(claim)
    lora = lora_rank_alpha(model)
    kind = FULL if lora is None else (MERGED if merge else PEFT)
    tmp = Path(tempfile.mkdtemp(prefix=".save-", dir=out))
    try:
        written = []
        if kind == PEFT:
            files = _write_adapter(tmp, model, lora, base_folder)
            if base_folder is None:
                _write_base(out, model, tokenizer, max_shard_bytes, owner, mode)
                written.append(BASE_NAME)
        else:
            entries = merged_entries(model) if kind == MERGED else full_entries(model)
            files = _write_full(tmp, model, entries, tokenizer, max_shard_bytes)
        saved = Saved(out, kind, files)
        written += _replace_weights(out, tmp, claim, ours, ownership.file_mode(mode))
        saved.bytes = sum((out / name).stat().st_size for name in files)
        ownership.write_info(out, {**info, "owner": owner.as_dict(), "format": kind,
                                   "files": files, "written": sorted(written),
                                   **({"lora": {"rank": lora[0], "alpha": lora[1]}}
                                      if lora else {})},
                             mode=ownership.file_mode(mode))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    saved.seconds = time.perf_counter() - t0
    return saved


def _write_full(folder: Path, model: nn.Module, entries: list[Entry], tokenizer,
                max_shard_bytes: int) -> dict[str, str]:
    # A save is bound by its weights' sha256 (trainer/output/weights.py): the configs and the
    # tokenizer are written beside it, by a thread of their own.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="save-configs") as pool:
        configs = pool.submit(_write_configs, folder, model, tokenizer)
        files = _write_weights(folder, entries, max_shard_bytes)
        configs.result()
    return files


def _write_configs(folder: Path, model: nn.Module, tokenizer) -> None:
    config = copy.deepcopy(model.config)
    config.use_cache = True  # the trainer turns the KV cache off; generation wants it
    config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def _write_weights(folder: Path, entries: list[Entry], max_shard_bytes: int) -> dict[str, str]:
    parts = weights.shards(entries, max_shard_bytes)
    if len(parts) == 1:
        return {"model.safetensors": weights.write_file(folder / "model.safetensors", parts[0],
                                                        fsync=False)[0]}
    files, weight_map = {}, {}
    for k, part in enumerate(parts, 1):
        name = f"model-{k:05d}-of-{len(parts):05d}.safetensors"
        files[name] = weights.write_file(folder / name, part, fsync=False)[0]
        weight_map.update({e.name: name for e in part})
    index = {"metadata": {"total_size": sum(e.nbytes for e in entries)}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return files


def _write_adapter(folder: Path, model: nn.Module, lora: tuple[int, float],
                   base_folder: Path | None) -> dict[str, str]:
    rank, alpha = lora
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha,
        "target_modules": sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                                  if isinstance(m, LoRALinear)}),
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
        "init_lora_weights": True, "use_rslora": False, "use_dora": False,
        "modules_to_save": None,
        "base_model_name_or_path": str(base_folder) if base_folder is not None else "base",
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))
    name = "adapter_model.safetensors"
    return {name: weights.write_file(folder / name, adapter_entries(model), fsync=False)[0]}


def _write_base(out: Path, model: nn.Module, tokenizer, max_shard_bytes: int, owner: Owner,
                mode: int) -> None:
    """A named model's untrained base (LoRA leaves it frozen), for PeftModel to load onto.

    Written once per run: a ``base`` folder an earlier save of this run wrote is
    kept (the base never changes); one it did not write is refused, never removed.
    """
    base = out / BASE_NAME
    if os.path.lexists(base):
        try:
            theirs = ownership.read_owner(base) if base.is_dir() else None
        except ownership.NotOurs:
            theirs = None
        if theirs is not None and theirs.same(owner):
            return
        raise ownership.NotOurs(f"{base} is there and this run did not write it: move it "
                                f"away (the adapter's base model goes there)")
    tmp = Path(tempfile.mkdtemp(prefix=".base-", dir=out))
    try:
        files = _write_full(tmp, model, full_entries(model), tokenizer, max_shard_bytes)
        for p in tmp.iterdir():
            os.chmod(p, ownership.file_mode(mode))
        ownership.write_info(tmp, {"owner": owner.as_dict(), "format": FULL, "files": files,
                                   "base_of": str(out)}, mode=ownership.file_mode(mode))
        os.chmod(tmp, mode)
        os.rename(tmp, base)  # never over a folder: base was not there just now
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _written_before(claim: dict) -> set[str]:
    """The names an earlier save of this run wrote into the folder (its ``rngdctl.json``:
    the weights files, and every other name it wrote), plain names only."""
    names = set(claim.get("files") or {}) | set(claim.get("written") or [])
    return {n for n in names if isinstance(n, str) and n == Path(n).name
            and n not in ("", ".", "..", INFO_NAME)}


def _replace_weights(out: Path, tmp: Path, claim: dict, ours: set[str], mode: int
                     ) -> list[str]:
    """Move the new files into ``out``; returns their names.

    Only a name this run wrote before is replaced: any other file in the way is
    refused (NotOurs) before anything moves. The claim is written first with no
    file named, so no ``rngdctl.json`` names a file being replaced; then the
    names of the last save that this one has not (another sharding) go.
    """
    new = sorted(p.name for p in tmp.iterdir())
    foreign = [n for n in new if os.path.lexists(out / n) and n not in ours]
    if foreign:
        raise ownership.NotOurs(f"{out / foreign[0]} is there and this run did not write it: "
                                f"move it away")
    # Not fsynced: after a power cut the older claim (fewer names ours) only refuses more.
    ownership.write_info(out, {**claim, "files": {}, "written": sorted(ours | set(new))},
                         mode=mode, sync=False)
    for name in sorted(ours - set(new) - {BASE_NAME}):
        old = out / name
        if os.path.lexists(old) and not old.is_dir():
            old.unlink()
    for name in new:
        os.chmod(tmp / name, mode)
        os.replace(tmp / name, out / name)
    weights.fsync_dir(out)
    return new
