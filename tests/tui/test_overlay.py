"""History: two marked runs' loss curves on one plot, smoothed by a rule the plot names."""

from __future__ import annotations

import pytest
from tui_support import table_rows

from daemon.store import Store
from rngdctl.tui.data import ViewSource
from rngdctl.tui.series import LossCurve, overlay_series
from rngdctl.tui.smoothing import EMA, MOVING_AVERAGE, Smoothing
from rngdctl.tui.widgets import OverlayScreen


async def _open_overlay(pilot, settle):
    await settle(pilot)
    await pilot.press("4", "m", "down", "m", "o")  # #2 oom-try, then #1 r60
    await settle(pilot)


async def test_m_marks_and_unmarks_history_runs(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4", "m")
        first = [r[0] for r in table_rows(pilot.app, "#history-table")]
        await pilot.press("down", "m", "up", "m")
        unmarked = [r[0] for r in table_rows(pilot.app, "#history-table")]
        subtitle = pilot.app.query_one("#history").border_subtitle
    assert first == ["◆ #2 oom-try", "#1 r60"]
    assert unmarked == ["#2 oom-try", "◆ #1 r60"]
    assert subtitle == "marked #1: mark one more with m"


async def test_o_overlays_the_two_marked_runs_losses_raw_at_first(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await _open_overlay(pilot, settle)
        screen = pilot.app.screen
        assert isinstance(screen, OverlayScreen) and screen.run_ids == (2, 1)
        frame = pilot.app.frame_text()
    assert "loss · raw, no smoothing" in frame
    assert "#2 oom-try (12 steps)" in frame and "#1 r60 (60 steps)" in frame
    assert "raw: every logged loss as the trainer wrote it" in frame


async def test_s_smooths_both_curves_and_the_plot_names_the_rule(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await _open_overlay(pilot, settle)
        await pilot.press("s")
        await settle(pilot)
        ema = pilot.app.frame_text()
        await pilot.press("s", "s")
        await settle(pilot)
        ma = pilot.app.frame_text()
        await pilot.press("escape")
        await settle(pilot)
        back = pilot.app.screen
    assert "loss · debiased EMA, beta 0.9" in ema
    assert "0.9·m_(t-1) + 0.1·loss_t, m_0 = 0; plotted m_t / (1 - 0.9^t)" in ema
    assert "loss · moving average of 10 steps" in ma
    assert not isinstance(back, OverlayScreen)


async def test_o_with_fewer_than_two_marks_says_what_to_do(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4", "m", "o")
        await settle(pilot)
        screen = pilot.app.screen
        toasts = [n.message for n in pilot.app._notifications]
    assert not isinstance(screen, OverlayScreen)
    assert toasts == ["mark two runs with m first (1 marked)"]


@pytest.mark.parametrize("smoothing", [Smoothing(), Smoothing(EMA, 0.9),
                                       Smoothing(MOVING_AVERAGE, 10)])
def test_the_overlay_smooths_every_logged_loss_before_it_downsamples(smoothing):
    steps = tuple(range(1, 1001))
    losses = tuple(3.0 - k / 1000 + (0.5 if k % 7 == 0 else 0.0) for k in steps)
    curve = LossCurve(1, "#1", steps, losses)

    few = overlay_series(curve, smoothing, buckets=1000)  # 2 x 1000 single points: no buckets
    many = overlay_series(curve, smoothing, buckets=50)

    assert few.y == tuple(smoothing.apply(losses)) and few.x == steps
    assert many.points == 1000 and len(many.x) <= 100
    assert set(many.y) <= set(few.y)  # each bucket keeps smoothed points, never a new value


def test_a_runs_loss_curve_keeps_every_finite_loss_in_step_order(store: Store, ids):
    source = ViewSource(store, home="h")
    [curve] = source.loss_curves((ids["r60"],))
    assert curve.label == "#1 r60" and curve.steps == tuple(range(1, 61))
    assert curve.losses == tuple(3.0 - n / 60 for n in range(1, 61))
