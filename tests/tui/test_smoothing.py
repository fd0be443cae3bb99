"""The overlay's smoothing rules: a debiased EMA and a trailing moving average.

Tolerances come from the arithmetic: each output is a sum of at most n
products, so its rounding error is at most about n·eps times the largest
|loss| (gamma(n), as in tests/trainer/tolerances.py); the EMA's debiasing
divides by 1 - beta^t, which is no smaller than 1 - beta, so its bound is
also divided by 1 - beta.
"""

from __future__ import annotations

import random
import sys

import pytest

from rngdctl.tui.smoothing import (
    EMA,
    MOVING_AVERAGE,
    PRESETS,
    Smoothing,
    debiased_ema,
    moving_average,
    next_preset,
)

EPS = sys.float_info.epsilon


def test_the_debiased_ema_starts_at_the_first_loss_and_follows_its_recurrence():
    # m1 = 2, m2 = 0.5*2 + 0.5*2 = 2, m3 = 0.5*2 + 0.5*3 = 2.5; divided by 1 - 0.5^t.
    got = debiased_ema([4.0, 2.0, 3.0], 0.5)
    assert got == pytest.approx([4.0, 2.0 / 0.75, 2.5 / 0.875], rel=8 * EPS)


def test_the_debiased_ema_of_a_constant_is_that_constant_from_the_first_step():
    # Not debiased, the first of these would be 5 * (1 - 0.99) = 0.05.
    n, beta = 200, 0.99
    got = debiased_ema([5.0] * n, beta)
    assert got == pytest.approx([5.0] * n, rel=4 * n * EPS / (1 - beta))


def test_an_ema_with_beta_zero_is_the_losses_themselves():
    assert debiased_ema([3.0, 1.0, 2.0], 0.0) == [3.0, 1.0, 2.0]


def test_the_moving_average_is_the_mean_of_the_last_window_losses_fewer_at_the_start():
    assert moving_average([1.0, 2.0, 3.0, 4.0, 5.0], 3) == [1.0, 1.5, 2.0, 3.0, 4.0]


def test_the_running_moving_average_equals_the_direct_mean_over_a_long_series():
    rng = random.Random(0)
    values = [rng.uniform(0.0, 10.0) for _ in range(5000)]
    window = 100
    got = moving_average(values, window)
    tol = 4 * len(values) * EPS * max(values)  # the running sum's rounding, over the window
    for i in (0, 1, 99, 100, 2500, 4999):
        chunk = values[max(0, i - window + 1):i + 1]
        assert got[i] == pytest.approx(sum(chunk) / len(chunk), abs=tol)


@pytest.mark.parametrize(("fn", "param"), [(debiased_ema, 1.0), (debiased_ema, -0.1),
                                            (moving_average, 0)])
def test_a_parameter_outside_its_range_is_refused(fn, param):
    with pytest.raises(ValueError):
        fn([1.0, 2.0], param)


def test_each_rule_names_its_kind_and_parameter():
    assert Smoothing(EMA, 0.9).label == "debiased EMA, beta 0.9"
    assert "0.9·m_(t-1) + 0.1·loss_t" in Smoothing(EMA, 0.9).rule
    assert "m_t / (1 - 0.9^t)" in Smoothing(EMA, 0.9).rule
    assert Smoothing(MOVING_AVERAGE, 10).label == "moving average of 10 steps"
    assert "the last 10 logged losses" in Smoothing(MOVING_AVERAGE, 10).rule
    assert Smoothing().label == "raw, no smoothing"
    assert Smoothing().apply([2.0, 1.0]) == [2.0, 1.0]


def test_the_presets_cycle_back_to_the_raw_losses():
    seen = [PRESETS[0]]
    for _ in PRESETS:
        seen.append(next_preset(seen[-1]))
    assert seen[-1] == PRESETS[0] and len(set(seen)) == len(PRESETS)
    assert {p.kind for p in PRESETS} == {"none", EMA, MOVING_AVERAGE}
