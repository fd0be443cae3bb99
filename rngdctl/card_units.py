"""A card's readings as rngdctl prints them (``cards``, the TUI's panel, ``show``, the note)."""

from __future__ import annotations

from rngdctl.units import DASH, finite

GIB = float(1 << 30)


def temp(c) -> str:
    return f"{c:.1f} °C" if finite(c) else DASH


def watts(w, limit=None) -> str:
    if not finite(w):
        return DASH
    return f"{w:.0f} / {limit:.0f} W" if finite(limit) else f"{w:.0f} W"


def util(u) -> str:
    return f"{u * 100:.0f} %" if finite(u) else DASH


def memory(used, total) -> str:
    if not finite(used):
        return DASH
    return (f"{used / GIB:.1f} / {total / GIB:.1f} GiB" if finite(total)
            else f"{used / GIB:.1f} GiB")


def span(low, high, show) -> str:
    """``low–high`` in ``show``'s words, one value when they agree, a dash when unknown."""
    if not finite(low) or not finite(high):
        return DASH
    a, b = show(low), show(high)
    return a if a == b else f"{a.split(' ')[0]}–{b}"


def reasons(names) -> str:
    from daemon.probes.smi import reason_words

    return ", ".join(reason_words(n) for n in names or ()) or DASH


def card_name(row: dict) -> str:
    return f"{row['node']}/{row['card']}" if row.get("node") else row["card"]


def card_range(row: dict) -> str:
    """A card's readings over a run (``Store.card_ranges``): ``npu1 55.0–61.5 °C,
    90–120 W, 12–80 % busy``."""
    return (f"{card_name(row)} {span(row['temp_min'], row['temp_max'], temp)}, "
            f"{span(row['power_min'], row['power_max'], watts)}, "
            f"{span(row['util_min'], row['util_max'], util)} busy")


def throttle_text(row: dict) -> str | None:
    """``npu1 throttled (thermal slowdown) in 2 of 42 readings``, or None."""
    from daemon.probes.smi import BENIGN_THROTTLE

    if not row.get("throttled"):
        return None
    slowing = [r for r in row.get("throttle") or () if r not in BENIGN_THROTTLE]
    return (f"{card_name(row)} throttled ({reasons(slowing)}) in {row['throttled']} "
            f"of {row['readings']} readings")
