"""The note's words: numbers as the note prints them, and a config in words.

Shared by ``collect`` (the step-model notes) and ``render`` (everything else).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from rngdctl.units import DASH as _DASH
from rngdctl.units import finite as _finite
from rngdctl.units import rate, secs  # noqa: F401  (re-exported: the note's units)

# === Numbers as the note prints them =========================================


def loss(x: float | None, digits: int = 4) -> str:
    if x is None:
        return _DASH
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def load(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 else f"{x:.1f}"


def load_span(span: tuple[float, float] | None) -> str | None:
    if span is None:
        return None
    low, high = load(span[0]), load(span[1])
    return low if low == high else f"{low}–{high}"


def percent(x: float | None) -> str:
    return f"{x * 100:+.1f} %" if _finite(x) else _DASH


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}–{last}"


def _ago(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"+{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"+{minutes}m{s:02d}s"
    hours, m = divmod(minutes, 60)
    return f"+{hours}h{m:02d}m"


#: Line breaks and other control characters: a value's own would start a line of the note
#: (a heading, a table row) where the note has none.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
#: What markdown reads inside a line: an escape, a code span, a cell's end, HTML.
_INLINE = re.compile(r"([\\`|<])")
_BACKTICKS = re.compile(r"`+")


def _md(text) -> str:
    """A value (a path, a name, a reason) as plain text inside one line of the note: a
    table cell, a list item or a heading. Its line breaks become spaces and the characters
    markdown reads are escaped, so it adds no heading, row or code span of its own."""
    flat = _CONTROL.sub(" ", str(text)).strip()
    flat = _INLINE.sub(r"\\\1", flat)
    return "\\" + flat if flat.startswith(("#", ">", "-", "+", "*", "=")) else flat


def code(text) -> str:
    """A value as one code span: its line breaks as ``\\n``, fenced by more backticks than
    any run of them inside it (a path or a line of Python, copied as it is)."""
    flat = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(flat)), default=0) + 1)
    pad = " " if flat[:1] == "`" or flat[-1:] == "`" else ""
    return f"{fence}{pad}{flat}{pad}{fence}"

# === A config in words ======================================================


def _get(config: dict, *names, default=None):
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def describe_placement(config: dict) -> str:
    """"2 cards × 8 resident layers per card", "1 card, all offload"."""
    cards = _get(config, "cards", default=1)
    resident = _get(config, "resident", "resident_layers")
    card_words = f"{cards} card{'s' if cards != 1 else ''}"
    if resident is None:
        return card_words
    if resident == 0:
        return f"{card_words}, all offload"
    per = " per card" if cards != 1 else ""
    return f"{card_words} × {resident} resident layer{'s' if resident != 1 else ''}{per}"


def describe_recipe(config: dict) -> str:
    """"tiny-llama, S=64, accum 2, lr 0.001, synthetic, seed 0" (the backend is hardware)."""
    parts = []
    model = _get(config, "model")
    if model is not None:
        parts.append(str(model))
    seq = _get(config, "seq_len", "seq-len", "seq")
    if seq is not None:
        parts.append(f"S={seq}")
    accum = _get(config, "accum", "accumulation", "grad_accum")
    if accum is not None:
        parts.append(f"accum {accum}")
    lr = _get(config, "lr")
    if lr is not None:
        parts.append(f"lr {lr:g}" if isinstance(lr, (int, float)) else f"lr {lr}")
    data = _get(config, "data")
    if data is not None:
        # "nsmc:/home/kim/nsmc/ratings_test.txt" reads as "nsmc:ratings_test.txt".
        kind, sep, path = str(data).partition(":")
        parts.append(f"{kind}:{Path(path).name}" if sep and "/" in path else str(data))
    seed = _get(config, "seed")
    if seed is not None:
        parts.append(f"seed {seed}")
    return ", ".join(parts) or "not recorded"
