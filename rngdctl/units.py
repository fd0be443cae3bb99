"""Numbers as rngdctl prints them: durations in s, ms or µs, three significant digits."""

from __future__ import annotations

import math

DASH = "–"  # a missing number, never an exception


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def sig(x: float) -> str:
    """Three significant digits, no exponent for the sizes a note meets."""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def secs(x: float | None) -> str:
    """A duration in s, ms or µs with three significant digits: 4.43 s, 18.4 ms, 32.0 µs."""
    if not finite(x):
        return DASH
    if abs(x) < 1e-9:  # a difference of medians that is zero up to rounding
        return "0 s"
    if abs(x) >= 1:
        return f"{sig(x)} s"
    if abs(x) >= 1e-3:
        return f"{sig(x * 1e3)} ms"
    return f"{sig(x * 1e6)} µs"


def rate(x: float | None) -> str:
    return sig(x) if finite(x) else DASH
