"""Order statistics: the one engine for every median and quartile the package gives, read
through ``at(offset, count)`` in sorted order (the store's indexes, a sorted list or a
running array), so the store's aggregates and the decoded steps' are the same arithmetic."""

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
    """The first and third quartiles (``statistics.quantiles``' inclusive interpolation) of
    n values read through ``at``."""
    if n < 2:
        return (at(0, 1)[0],) * 2 if n else None
    out = []
    for i in (1, 3):
        j, delta = divmod(i * (n - 1), 4)
        a, b = at(j, 2)
        out.append((a * (4 - delta) + b * delta) / 4)
    return out[0], out[1]


def median(values) -> float | None:
    """The median of any values (None for none)."""
    ordered = sorted(values)
    return median_of_sorted(len(ordered), lambda o, c: ordered[o:o + c])


def quartiles(values) -> tuple[float, float] | None:
    """The first and third quartiles of any values (None for none)."""
    ordered = sorted(values)
    return quartiles_of_sorted(len(ordered), lambda o, c: ordered[o:o + c])


def weighted_quantile(values: list[tuple[float, float, float]], q: float) -> float:
    """The ``q`` quantile of (value, weight, _) each counting its weight: a value sits at
    the middle of its weight along the sorted line, and between two the quantile is
    interpolated (with equal weights the median is ``median``'s)."""
    ranked = sorted((v, w) for v, w, _ in values if w > 0)
    at, below, prev = q * sum(w for _, w in ranked), 0.0, None
    for v, w in ranked:
        here = below + w / 2
        if here >= at:
            return v if prev is None else prev[0] + (v - prev[0]) * (at - prev[1]) / (here - prev[1])
        prev, below = (v, here), below + w
    return ranked[-1][0]
