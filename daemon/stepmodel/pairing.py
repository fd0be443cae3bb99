"""Interleaved passes: which main steps ran beside the baseline's, and their block pairs."""

from __future__ import annotations

import math
import statistics

from daemon import stats
from daemon.stepmodel.compare import median_se
from daemon.stepmodel.fit import SPLIT, Prediction, Steps, predict_step


def paired_medians(baseline_steps: list[dict], main_steps: list[dict], block: int,
                   prediction: Prediction | None = None) -> dict:
    """``paired``'s medians: the main's step and phases on the baseline's host."""
    return paired(baseline_steps, main_steps, block, prediction)[0]


def paired(baseline_steps: list[dict], main_steps: list[dict], block: int,
           prediction: Prediction | None = None) -> tuple[dict, dict]:
    """The main pass's median step and phases, measured against the baseline block by block,
    and how far each may be off by chance (``compare``'s ``paired`` and ``paired_spreads``).

    For interleaved passes: block k of each pass (its steps kB+1 to kB+B) ran
    next to the other's block k, on the same host. Each pair's steps, both
    passes', are divided by the pair's own level: the geometric mean of the
    two passes' medians in the pair, so that each pass weighs the same
    whatever its share of the pair's steps (the median of all the pair's
    steps leaned toward the pass with more of them there, and with a config
    20 % faster than its baseline that put the error 0.3-0.8 % off). The
    main's median over all its divided steps, over the baseline's, is the
    ratio of the two passes on one host. When the host
    slows down (or speeds up) part-way through, the plain medians of the two
    passes can land on either side of the change (each pass has half its
    steps on each side, a block more or less); here every pair is measured
    against its own level, so only the pair that straddles the change is off.
    Steps 6-N only, as everywhere.

    With ``prediction`` every term is paired, not only those a baseline step
    measures as such: each baseline step gives what the asked config would
    take by the model's form from that step's own phases (``fit.predict_step``:
    the device optimizer per resident layer from the step's host optimizer,
    the unclaimed rest from the step's own), and the ratio is the main's
    measured over that. Times the prediction's own value, it is the main's
    step (or phase) on the host the model was fitted on, so the error is the
    paired ratio alone: the model's terms, medians over a pass that a host
    change split in two, cannot land on one side of the change and the main's
    on the other. Without it, each key is paired with the same key of the
    baseline's steps and scaled by the baseline's median over the pairs.

    A key the pairs cannot give (no pair, or a phase at 0 s in the baseline)
    is left out, so ``compare`` keeps the plain median for it.

    The spread of a key is ``Comparison.spread``'s rule on the divided steps:
    twice the standard error of the difference of the two medians, each
    ``median_se`` of its pass's divided steps. Divided by their pair's level,
    the steps no longer carry a host change that the pairs take out; the
    plain quartiles of a pass a hog split in two do, and no move of the
    compute would ever be beyond them.
    The medians and quartiles are weighted: each pair counts by how calm the
    host was around it (``_pair_weights``), so that a hog that joined part-way
    through costs the pairs it hit, not the run; on a host as calm (or as
    busy) throughout every pair counts in full. The number of steps behind a
    standard error is then the number of equal steps the weights are worth.
    Each pass's standard error is scaled back up by what the division took
    out of its steps' own spread (``_kept_variance``): a quarter of the
    variance in blocks of 2, where a step is one of the four its level is
    made of.

    A block's first step is left out of the pair (blocks of 3 or more): the
    first step after a switch between the passes runs on caches the other
    model filled, a few percent slower, and in mirrored pairs which of a
    pair's blocks opens with a switch alternates between the passes. Blocks
    of 2 (the cpu default) keep every step: each pass then runs in stretches
    of two blocks, every stretch of either pass opens with a switch, and the
    slow steps are a quarter of both passes (leaving each block's first out
    would drop half the steps).
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
    out, spreads = {}, {}
    for key in ("step_s", *SPLIT[:-1]):
        divided = []  # per pair: the baseline's steps and the main's, over the pair's level
        for k in pairs:
            b = [float(e[key]) for e in expect[k] if e.get(key) is not None]
            m = [float(g[key]) for g in got[k] if g.get(key) is not None]
            level = math.sqrt(statistics.median(b) * statistics.median(m)) if b and m else 0.0
            if level > 0:
                divided.append(([v / level for v in b], [v / level for v in m]))
        if not divided:
            continue
        weights = _pair_weights(divided, block)
        on_base = [(v, w, _kept_variance(len(b), len(m)))
                   for (b, m), w in zip(divided, weights) for v in b]
        on_main = [(v, w, _kept_variance(len(m), len(b)))
                   for (b, m), w in zip(divided, weights) for v in m]
        mid_main, mid_base = _weighted_quantile(on_main, 0.5), _weighted_quantile(on_base, 0.5)
        if mid_base > 0:
            out[key] = mid_main / mid_base * _anchor(key, prediction,
                                                     [s for k in pairs for s in base[k]])
            spreads[key] = 2 * math.hypot(_median_se(on_main, mid_main),
                                          _median_se(on_base, mid_base))
    return out, spreads


#: Steps either side of a pair that say how noisy the host was around it.
STEPS_NEAR = 10
#: A pair counts in full unless the steps around it spread this many times as far
#: as in the calmest quarter of the run (a host's noise, measured from ~20 steps,
#: wanders by about a quarter between stretches of the same quiet host).
CALM_MARGIN = 1.5


def _pair_weights(divided: list[tuple[list[float], list[float]]], block: int) -> list[float]:
    """How much each block pair counts: less where the host was noisier than at its calmest.

    A hog that joins halfway makes the later steps wander by tens of percent (a
    tiny-llama step of 8 ms took 16, 20, 24 or 28 ms as the scheduler let it),
    against a few percent before: pooled in full, those steps make half the
    ratio's noise. Each pair's noise is the median distance (relative) of the
    steps of the pairs within ``STEPS_NEAR`` steps either side from their
    pass's median; a pair whose noise is past ``CALM_MARGIN`` times the calmest
    quarter's counts by the inverse square of the excess (a weighted mean's
    weight for a noisier value). A run as noisy throughout (a hog from the
    start, or a quiet host) keeps nearly every pair in full: on seeded quiet
    runs the error's spread is 2 % wider than with no weights at all.
    """
    mid_b = statistics.median(v for b, _ in divided for v in b)
    mid_m = statistics.median(v for _, m in divided for v in m)
    spread = [[_off(v, mid_b) for v in b] + [_off(v, mid_m) for v in m] for b, m in divided]
    reach = max(1, round(STEPS_NEAR / (2 * block)))
    noise = [statistics.median(d for near in spread[max(0, j - reach): j + reach + 1]
                               for d in near)
             for j in range(len(divided))]
    calm = CALM_MARGIN * (statistics.quantiles(noise, n=4, method="inclusive")[0]
                          if len(noise) > 1 else noise[0])
    if calm <= 0:  # a phase the clock cannot tell apart step by step: nothing to weigh by
        return [1.0] * len(noise)
    return [1.0 if n <= calm else (calm / n) ** 2 for n in noise]


def _off(value: float, middle: float) -> float:
    """How far a step is from its pass's median, as a share of it (0 with no median)."""
    return abs(value / middle - 1) if middle > 0 else 0.0


def _weighted_quantile(values: list[tuple[float, float, float]], q: float) -> float:
    """The ``q`` quantile of (value, weight, _) each counting its weight: a value sits at
    the middle of its weight along the sorted line, and between two the quantile is
    interpolated (with equal weights the median is ``statistics.median``'s)."""
    ranked = sorted((v, w) for v, w, _ in values if w > 0)
    at, below = q * sum(w for _, w in ranked), 0.0
    prev = None
    for v, w in ranked:
        here = below + w / 2
        if here >= at:
            if prev is None:
                return v
            return prev[0] + (v - prev[0]) * (at - prev[1]) / (here - prev[1])
        prev, below = (v, here), below + w
    return ranked[-1][0]


def _median_se(values: list[tuple[float, float, float]], median: float) -> float:
    """``median_se`` of weighted divided steps: their weighted quartiles, the number of
    equally weighted steps that would say as much (Kish's), and what the division by
    each pair's level took out of their own spread (``_kept_variance``), put back."""
    weights = [w for _, w, _ in values]
    n = sum(weights) ** 2 / sum(w * w for w in weights)
    kept = sum(w * k for _, w, k in values) / sum(weights)
    quartiles = (_weighted_quantile(values, 0.25), _weighted_quantile(values, 0.75))
    return median_se(quartiles, median, max(1, round(n))) / math.sqrt(kept)


def _kept_variance(own: int, other: int) -> float:
    """The share of a step's own variance left once divided by its pair's level.

    The level is made of the pair's steps, this one among them, so dividing
    by it takes part of the step's own deviation out with the host's: for a
    level that is the mean (in logs) of the two passes' means, a step of a
    pass with ``own`` steps in the pair, the other pass ``other``, keeps
    1 - 3 / (4 own) + 1 / (4 other) of its variance; 3/4 in blocks of 2.
    The passes' divided steps would understate their spread by that much.
    """
    return 1 - 3 / (4 * own) + 1 / (4 * other)


def _anchor(key: str, prediction: Prediction | None, base: list[dict]) -> float:
    """What the paired ratio multiplies: the prediction's value, else the baseline's median."""
    if prediction is not None:
        return prediction.step_s if key == "step_s" else prediction.phases[key]
    return statistics.median(float(s["step_s"] if key == "step_s"
                                   else (s.get("phases") or {}).get(key, 0.0)) for s in base)


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
