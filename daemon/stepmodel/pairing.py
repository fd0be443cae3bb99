"""Interleaved passes: which main steps ran beside the baseline's, and their block pairs."""

from __future__ import annotations

import math

from daemon.stepmodel import stats
from daemon.stepmodel.compare import median_se
from daemon.stepmodel.fit import SPLIT, Prediction, predict_step


def paired(baseline_steps: list[dict], main_steps: list[dict], block: int,
           prediction: Prediction | None = None) -> tuple[dict, dict]:
    """The main pass's median step and phases measured against the baseline block by block,
    and the standard error of each (``compare``'s ``paired``).

    Block k of each pass ran next to the other's block k, on the same host. Each
    pair's steps are divided by the pair's level (the geometric mean of the two
    passes' medians there), so a host change moves only the pair that straddles
    it; the main's median over its divided steps, over the baseline's, is the
    ratio of the passes on one host, times the prediction's value. With
    ``prediction`` each baseline step gives the asked config's phases by the
    model's form (``fit.predict_step``), so every term is paired. Each pair
    weighs by how calm the host was around it (``_pair_weights``). Steps 6-N; in
    blocks of 3 or more a block's first step (after a switch) is left out, in
    blocks of 2 every stretch of either pass opens with one. docs/design.md,
    "Timing the two passes", says why of each.
    """
    skip = 1 if block >= 3 else 0

    def by_block(steps: list[dict]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for s in stats.steady(steps):
            out.setdefault((s["step"] - 1) // block, []).append(s)
        return out

    def measured(s: dict) -> dict:
        return {**(s.get("phases") or {}), "step_s": s["step_s"]}

    def expected(s: dict) -> dict | None:
        return measured(s) if prediction is None else predict_step(prediction, s)

    def timed(s: dict) -> bool:
        return (s["step"] - 1) % block >= skip

    base, main = by_block(baseline_steps), by_block(main_steps)
    pairs = [k for k in base if k in main]
    expect = {k: [e for e in (expected(s) for s in base[k] if timed(s)) if e is not None]
              for k in pairs}
    got = {k: [measured(s) for s in main[k] if timed(s)] for k in pairs}
    out, errors = {}, {}
    for key in ("step_s", *SPLIT[:-1]):
        divided = []  # per pair: the baseline's steps and the main's, over the pair's level
        for k in pairs:
            b = [float(e[key]) for e in expect[k] if e.get(key) is not None]
            m = [float(g[key]) for g in got[k] if g.get(key) is not None]
            level = math.sqrt(stats.median(b) * stats.median(m)) if b and m else 0.0
            if level > 0:
                divided.append(([v / level for v in b], [v / level for v in m]))
        if not divided:
            continue
        weights = _pair_weights(divided, block)
        on_base = [(v, w, _kept_variance(len(b), len(m)))
                   for (b, m), w in zip(divided, weights) for v in b]
        on_main = [(v, w, _kept_variance(len(m), len(b)))
                   for (b, m), w in zip(divided, weights) for v in m]
        mid_main, mid_base = stats.weighted_quantile(on_main, 0.5), \
            stats.weighted_quantile(on_base, 0.5)
        if mid_base > 0:
            out[key] = mid_main / mid_base * _anchor(key, prediction,
                                                     [s for k in pairs for s in base[k]])
            errors[key] = math.hypot(_median_se(on_main, mid_main), _median_se(on_base, mid_base))
    return out, errors


#: Steps either side of a pair that say how noisy the host was around it.
STEPS_NEAR = 10
#: A pair counts in full unless the steps around it spread this many times as far
#: as in the calmest quarter of the run (a host's noise, measured from ~20 steps,
#: wanders by about a quarter between stretches of the same quiet host).
CALM_MARGIN = 1.5


def _pair_weights(divided: list[tuple[list[float], list[float]]], block: int) -> list[float]:
    """How much each block pair counts: less where the host was noisier than at its calmest
    (a hog that joins halfway would make half the ratio's noise). A pair's noise is the
    median relative distance from their pass's median of the steps within ``STEPS_NEAR``;
    past ``CALM_MARGIN`` times the calmest quarter's, it counts by the inverse square of
    the excess. A run as noisy throughout keeps every pair."""
    mid_b = stats.median([v for b, _ in divided for v in b])
    mid_m = stats.median([v for _, m in divided for v in m])
    spread = [[_off(v, mid_b) for v in b] + [_off(v, mid_m) for v in m] for b, m in divided]
    reach = max(1, round(STEPS_NEAR / (2 * block)))
    noise = [stats.median([d for near in spread[max(0, j - reach): j + reach + 1] for d in near])
             for j in range(len(divided))]
    calm = CALM_MARGIN * stats.quartiles(noise)[0]
    if calm <= 0:  # a phase the clock cannot tell apart step by step: nothing to weigh by
        return [1.0] * len(noise)
    return [1.0 if n <= calm else (calm / n) ** 2 for n in noise]


def _off(value: float, middle: float) -> float:
    """How far a step is from its pass's median, as a share of it (0 with no median)."""
    return abs(value / middle - 1) if middle > 0 else 0.0


def _median_se(values: list[tuple[float, float, float]], median: float) -> float:
    """``median_se`` of weighted divided steps: their weighted quartiles, the number of
    equally weighted steps that would say as much (Kish's), and what the division by
    each pair's level took out of their own spread (``_kept_variance``), put back."""
    weights = [w for _, w, _ in values]
    n = sum(weights) ** 2 / sum(w * w for w in weights)
    kept = sum(w * k for _, w, k in values) / sum(weights)
    quartiles = (stats.weighted_quantile(values, 0.25), stats.weighted_quantile(values, 0.75))
    return median_se(quartiles, median, max(1, round(n))) / math.sqrt(kept)


def _kept_variance(own: int, other: int) -> float:
    """The share of a step's own variance left once divided by its pair's level, which is
    made of the pair's steps, this one among them: for a level that is the mean (in logs)
    of the passes' means, 1 - 3 / (4 own) + 1 / (4 other); 3/4 in blocks of 2."""
    return 1 - 3 / (4 * own) + 1 / (4 * other)


def _anchor(key: str, prediction: Prediction | None, base: list[dict]) -> float:
    """What the paired ratio multiplies: the prediction's value, else the baseline's median."""
    if prediction is not None:
        return prediction.step_s if key == "step_s" else prediction.phases[key]
    return stats.median([float(s["step_s"] if key == "step_s"
                               else (s.get("phases") or {}).get(key, 0.0)) for s in base])


def paired_window(main_config: dict | None, baseline: stats.PassStats) -> tuple[int, int] | None:
    """``compare``'s window for a run whose passes may have been interleaved, (the baseline's
    last step, the block): then only the main steps beside the baseline's share its host."""
    block = int((main_config or {}).get("interleave") or 0)
    return (baseline.step_span[1], block) if block and baseline.step_span else None
