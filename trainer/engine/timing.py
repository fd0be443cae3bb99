"""How the two timed passes share the host: settling before them, interleaving them.

The step-time model compares a baseline pass with the asked config
(docs/design.md "Timing the two passes"). These rules decide when the
process has warmed up (``settled_by_rule``) and in which order the passes'
steps run (``interleaved_order``); trainer/train.py applies them.
"""

from __future__ import annotations

import statistics

#: Settling rule: the median of the last SETTLE_K untimed steps within
#: SETTLE_TOL of the median of the SETTLE_K steps before them.
SETTLE_K = 5
SETTLE_TOL = 0.03


def settled_by_rule(times: list[float], k: int = SETTLE_K, tol: float = SETTLE_TOL) -> bool:
    """Whether the last ``k`` step times have settled against the ``k`` before them."""
    if len(times) < 2 * k:
        return False
    last = statistics.median(times[-k:])
    before = statistics.median(times[-2 * k:-k])
    return abs(last - before) <= tol * before


def interleaved_order(steps: list[int], block: int) -> list[int]:
    """Which pass runs each step when passes of ``steps`` steps alternate in blocks.

    Pairs of blocks in ABBA order: the first pair runs pass 0's block then
    pass 1's, the next pass 1's then pass 0's, and so on (so the passes' middle
    blocks run back to back, 2 x ``block`` steps each). Strict alternation
    (ABAB) puts pass 0 first in every pair, so anything that makes the
    process a little faster as it runs (warm-up left after settling, a
    clock, a cache filling) lands on pass 0 as a bias: on a quiet host the
    baseline's compute came out ~1 % slower than the identical config's.
    Mirrored pairs cancel a linear drift within every four blocks. A pass
    that has finished drops out; the other runs on alone.
    """
    left = list(steps)
    order: list[int] = []
    pair = 0
    while any(left):
        for which in (range(len(left)) if pair % 2 == 0 else reversed(range(len(left)))):
            n = min(block, left[which])
            order += [which] * n
            left[which] -= n
        pair += 1
    return order
