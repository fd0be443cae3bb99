"""Order statistics read through a sorted reader: the median and quartiles of n values
from the one or two values at their ranks, never all n."""

from __future__ import annotations


def median_of_sorted(n: int, at) -> float | None:
    """``statistics.median`` of n values, read through ``at(offset, count)`` in sorted order."""
    if not n:
        return None
    if n % 2:
        return at(n // 2, 1)[0]
    a, b = at(n // 2 - 1, 2)
    return (a + b) / 2


def quartiles_of_sorted(n: int, at) -> tuple[float, float] | None:
    """``quartiles`` (inclusive interpolation) of n values read through ``at``."""
    if n < 2:
        return (at(0, 1)[0],) * 2 if n else None
    out = []
    for i in (1, 3):
        j, delta = divmod(i * (n - 1), 4)
        a, b = at(j, 2)
        out.append((a * (4 - delta) + b * delta) / 4)
    return out[0], out[1]
