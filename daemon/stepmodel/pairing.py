"""Interleaved passes: which main steps ran beside the baseline's, and their block pairs."""

from __future__ import annotations

import statistics

from daemon import stats
from daemon.stepmodel.fit import SPLIT, Steps


def paired_medians(baseline_steps: list[dict], main_steps: list[dict], block: int) -> dict:
    """The main pass's median step and phases, measured against the baseline block by block.

    For interleaved passes: block k of each pass (its steps kB+1 to kB+B) ran
    next to the other's block k, on the same host. Each pair's steps, both
    passes', are divided by the pair's own level (the median of the pair's
    steps); the main's median over all its divided steps, over the
    baseline's, is the ratio of the two passes on one host; times the
    baseline's median over the same steps, it is the main's step (or phase)
    on the baseline's host. On a steady host that is the main's own median,
    give or take the noise. When the host slows down (or speeds up) part-way
    through, the plain medians of the two passes can land on either side of
    the change (each pass has half its steps on each side, a block more or
    less); here every pair is measured against its own level, so only the
    pair that straddles the change is off. Steps 6-N only, as everywhere.
    A key the pairs cannot give (no pair, or a phase at 0 s in the baseline)
    is left out, so ``compare`` keeps the plain median for it.

    A block's first step is left out of the pair (blocks of 3 or more): the
    first step after a switch between the passes runs on caches the other
    model filled, a few percent slower, and in mirrored pairs every baseline
    block starts with a switch but only every other main block does.
    """
    skip = 1 if block >= 3 else 0

    def by_block(steps: list[dict]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for s in stats.steady(steps):
            out.setdefault((s["step"] - 1) // block, []).append(s)
        return out

    def values(steps: list[dict], key: str) -> list[float]:
        out = []
        for s in steps:
            v = s["step_s"] if key == "step_s" else (s.get("phases") or {}).get(key)
            if v is not None and (s["step"] - 1) % block >= skip:
                out.append(float(v))
        return out

    base, main = by_block(baseline_steps), by_block(main_steps)
    pairs = [k for k in base if k in main]
    out = {}
    for key in ("step_s", *SPLIT[:-1]):
        on_base, on_main = [], []
        for k in pairs:
            b, m = values(base[k], key), values(main[k], key)
            level = statistics.median(b + m) if b and m else 0.0
            if level > 0:
                on_base += [v / level for v in b]
                on_main += [v / level for v in m]
        whole = [float(s["step_s"] if key == "step_s" else (s.get("phases") or {}).get(key, 0.0))
                 for k in pairs for s in base[k]]
        if on_base and statistics.median(on_base) > 0:
            out[key] = (statistics.median(on_main) / statistics.median(on_base)
                        * statistics.median(whole))
    return out


def paired_window(main_config: dict | None, baseline_steps: Steps) -> dict:
    """``compare``'s window arguments for a run whose passes may have been interleaved.

    Interleaved, only the main steps that ran alongside the baseline's share
    its host: the window ends at the baseline's last step. One after the
    other, it is the whole main pass.
    """
    block = int((main_config or {}).get("interleave") or 0)
    if isinstance(baseline_steps, stats.PassStats):
        last = baseline_steps.step_span[1] if baseline_steps.step_span else None
    else:
        last = max((s["step"] for s in baseline_steps), default=None)
    if not block or last is None:
        return {}
    return {"last": last, "interleave": block}
