"""A checkpoint manifest's form: its values of the right types, agreeing with each other.

trainer/output/checkpoint.py reads a manifest (a private regular file, capped, that
matches its own checksum) and asks here whether what it says can be resumed
from, before a single weights file is opened. A checksum is no defence
against a manifest written on purpose, and a crash-free writer can still
have a bug: every value the resume uses is checked here, each failure one
line naming the manifest and the value.

What must agree: each pass's losses are its steps done (a resume goes on
at the next step: fewer would train steps again, more would skip them), at
most its steps; the checkpoint's step is the main pass's; every file is a
pass's, and every pass that a resume loads from the checkpoint (the main
pass once it has a step, another pass part-way) has its file listed, so it
is verified before it is read.
"""

from __future__ import annotations

import base64
import binascii
import re

from trainer.records import MAIN

_FILE = re.compile(r"([a-z]+)\.safetensors")
_RNG = re.compile(r"torch|cuda\.\d+")
_HEX = re.compile(r"[0-9a-f]{1,64}")


class Invalid(ValueError):
    """A manifest value of the wrong type, or two values that disagree (trainer/output/checkpoint.py
    makes it a CheckpointError naming the manifest)."""


def check(m: dict) -> None:
    """Raise Invalid (one line) unless manifest ``m`` can be resumed from as far as its own
    values go."""
    _get(m, "name", str, "name")
    owner = _get(m, "owner", dict, "owner")
    for key in ("run_id", "home_id"):
        _get(owner, key, (str, type(None)), f"owner.{key}")
    _get(m, "time", (int, float), "time")
    state = _get(m, "state", dict, "state")
    _get(state, "fingerprint", dict, "state.fingerprint")
    _get(state.get("fingerprint"), "files", dict, "state.fingerprint.files")
    passes = _get(state, "passes", dict, "state.passes")
    if MAIN not in passes:
        raise Invalid("state.passes has no main pass")
    for label in passes:
        _check_pass(label, _get(passes, label, dict, f"state.passes.{label}"))
    step = _get(state, "step", int, "state.step")
    if step != passes[MAIN]["steps_done"]:
        raise Invalid(f"state.step is {step}, the main pass's steps done "
                            f"{passes[MAIN]['steps_done']}")
    _check_files(_get(m, "files", dict, "files"), passes)
    _check_rng(_get(m, "rng", dict, "rng"))


def _check_pass(label: str, p: dict) -> None:
    where = f"state.passes.{label}"
    steps = _get(p, "steps", int, f"{where}.steps")
    done = _get(p, "steps_done", int, f"{where}.steps_done")
    _get(p, "resident", int, f"{where}.resident")
    losses = _get(p, "losses", list, f"{where}.losses")
    config = _get(p, "config", (dict, type(None)), f"{where}.config")
    if not 0 <= done <= steps or steps < 1:
        raise Invalid(f"{where}: {done} steps done of {steps}")
    if len(losses) != done:
        raise Invalid(f"{where}: {len(losses)} losses for {done} steps done")
    for k, loss in enumerate(losses):
        if not _is(loss, (int, float)):
            raise Invalid(f"{where}.losses[{k}] is {_kind(loss)}, not a number")
    if done and config is None:
        raise Invalid(f"{where}.config is null for a pass with steps done")


def _check_files(files: dict, passes: dict) -> None:
    for name, info in files.items():
        match = _FILE.fullmatch(name)
        if match is None or match.group(1) not in passes:
            raise Invalid(f"files: {name!r} is not the file of one of its passes")
        info = _get(files, name, dict, f"files.{name}")
        digest = _get(info, "xxh3_64", str, f"files.{name}.xxh3_64")
        if not _HEX.fullmatch(digest):
            raise Invalid(f"files.{name}.xxh3_64 is not a checksum in hex")
        if _get(info, "bytes", int, f"files.{name}.bytes") < 0:
            raise Invalid(f"files.{name}.bytes is negative")
    for label, p in passes.items():
        loaded = p["steps_done"] > 0 and (label == MAIN or p["steps_done"] < p["steps"])
        if loaded and f"{label}.safetensors" not in files:
            raise Invalid(f"files lists no {label}.safetensors, which the {label} pass "
                                f"at step {p['steps_done']} is resumed from")


def _check_rng(rng: dict) -> None:
    if "torch" not in rng:
        raise Invalid("rng has no torch state")
    for name, text in rng.items():
        if not _RNG.fullmatch(name):
            raise Invalid(f"rng: {name!r} is not a random state the trainer keeps")
        if not isinstance(text, str):
            raise Invalid(f"rng.{name} is {_kind(text)}, not base64 text")
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise Invalid(f"rng.{name} is not base64") from None
        if name == "torch" and len(raw) != _torch_rng_bytes():
            raise Invalid(f"rng.torch holds {len(raw)} bytes, torch's random state "
                                f"{_torch_rng_bytes()}")


def _torch_rng_bytes() -> int:
    """The size of torch's CPU random state: what ``torch.set_rng_state`` takes."""
    import torch

    return torch.get_rng_state().numel()


def _get(obj: dict, key: str, kinds, name: str):
    """``obj[key]``, which must be one of ``kinds`` (an int is never a bool here)."""
    if not isinstance(obj, dict) or key not in obj:
        raise Invalid(f"has no {name}")
    value = obj[key]
    if not _is(value, kinds):
        words = "a number" if kinds == (int, float) else " or ".join(
            _KIND_WORDS[k] for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise Invalid(f"{name} is {_kind(value)}, not {words}")
    return value


def _is(value, kinds) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)


_KIND_WORDS = {str: "a string", int: "an integer", float: "a number", dict: "an object",
               list: "a list", type(None): "null"}


def _kind(value) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return _KIND_WORDS.get(type(value), type(value).__name__)
