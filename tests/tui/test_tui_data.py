"""The view model: downsampling and medians, without Textual."""

from __future__ import annotations

from tui_support import NOW

from daemon import stats
from rngdctl.tui.data import MinMaxBuckets, ViewSource


def test_downsampling_keeps_every_spike_and_at_most_two_points_per_bucket():
    buckets = MinMaxBuckets(limit=50)
    for n in range(1, 100_001):
        buckets.append(n, 9.0 if n == 77_777 else -1.0 if n == 3 else 4.4)
    series = buckets.series()
    assert len(series.x) <= 100
    assert series.points == 100_000
    assert (77_777, 9.0) in zip(series.x, series.y)
    assert (3, -1.0) in zip(series.x, series.y)
    assert list(series.x) == sorted(series.x)


def test_a_series_of_up_to_twice_the_buckets_is_plotted_point_for_point():
    buckets = MinMaxBuckets(limit=50)
    for n in range(1, 101):
        buckets.append(n, float(n % 7))
    assert buckets.series().x == tuple(range(1, 101))


def test_medians_read_incrementally_equal_daemon_stats(store, ids):
    source = ViewSource(store, home="h", clock=lambda: NOW)
    first = source.build().current
    store.add_steps(ids["r200"], [])
    steps = store.steps(ids["r200"])
    assert first.median_s == stats.median_step_s(steps)
    assert first.tok_s == stats.tokens_per_s(steps)
    assert source.build().current == first  # a second refresh reads nothing new


def test_a_run_that_has_only_its_baseline_shows_the_baseline_pass(store, ids):
    from trainer import records

    run_id = store.add_run({"cards": 1, "resident": 2, "steps": 50, "baseline": True,
                            "baseline_steps": 8}, name="b-only", now=NOW)
    store.claim_for_launch(run_id, launcher="local", now=NOW)  # r200 is running: refused
    store.update_run(run_id, status="running")
    store.add_steps(run_id, [records.Step("baseline", n, 2.0, 1.0, 64, 1e-5, time=NOW)
                             for n in range(1, 4)])
    view = ViewSource(store, home="h", clock=lambda: NOW, run_ref=run_id).build().current
    assert (view.label, view.step, view.steps_total) == ("baseline", 3, 8)
