"""The view model: downsampling and medians, without Textual."""

from __future__ import annotations

import pytest
from tui_support import NOW

from daemon.stepmodel import stats
from rngdctl.tui.data import ViewSource
from rngdctl.tui.series import MinMaxBuckets


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
    assert first.median_s == stats.PassStats.of_steps(steps).median_step_s
    assert first.tok_s == stats.PassStats.of_steps(steps).tokens_per_s
    assert source.build().current == first  # a second refresh reads nothing new


# None: the default, passes one after the other; "many": a stored config that cannot say.
@pytest.mark.parametrize("given, total", [(8, 8), (None, 40), ("many", None)])
def test_a_run_that_has_only_its_baseline_shows_the_baseline_pass(store, ids, given, total):
    from trainer import records

    run_id = store.add_run({"cards": 1, "resident": 2, "steps": 50, "baseline": True,
                            "baseline_steps": given}, name="b-only", now=NOW)
    store.claim_for_launch(run_id, launcher="local", now=NOW)  # r200 is running: refused
    store.update_run(run_id, status="running")
    store.add_steps(run_id, [records.Step("baseline", n, 2.0, 1.0, 64, 1e-5, time=NOW)
                             for n in range(1, 4)])
    view = ViewSource(store, home="h", clock=lambda: NOW, run_ref=run_id).build().current
    assert (view.label, view.step, view.steps_total) == ("baseline", 3, total)


def test_the_current_run_splits_the_model_error_by_term_and_says_when_the_host_changed(
        store, ids):
    from daemon import stepmodel

    view = ViewSource(store, home="h", clock=lambda: NOW).build().current
    c = stepmodel.for_run(store, ids["r200"])
    # r200's main pass computes 20 % slower (fwd_bwd 1.2 s) than its baseline (1.0 s),
    # every step alike (an interval of 0): the same work, so the host's, and the rest
    # of the model is apart from it.
    assert view.error == c.error and view.interval == c.interval
    assert view.error_terms.startswith(c.error_terms().split(", ")[0])
    assert view.host_notice == (f"host changed: compute +20.0 % (±0.0 %), rest of the "
                                f"model {c.error_of_rest * 100:+.1f} %")


def test_an_interleaved_running_run_refits_the_model_as_its_baseline_grows(store):
    from trainer import records

    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 20, "baseline": True,
                            "baseline_steps": 20, "interleave": 5}, now=NOW)
    store.claim_for_launch(run_id, launcher="local", now=NOW)
    store.update_run(run_id, status="running")
    extra = {"layers": 4, "cards": 1, "resident_per_card": 0, "seq_len": 64, "accum": 2}
    phases = {"fwd_bwd": 0.5, "upload": 0.1, "download": 0.1, "host_optim": 0.1,
              "device_optim": 0.1, "wait": 0.0}

    def add(label, steps, step_s):
        store.add_steps(run_id, [records.Step(label, n, 2.0, step_s, 128, 1e-5,
                                              phases=phases, extra=extra, time=NOW)
                                 for n in steps])

    add("baseline", range(1, 6), 1.0)
    add("main", range(1, 6), 1.0)
    source = ViewSource(store, home="h", clock=lambda: NOW, run_ref=run_id)
    first = source.build().current.model_s
    add("baseline", range(6, 11), 2.0)  # the host got slower: the baseline's median moves
    add("main", range(6, 11), 2.0)
    assert source.build().current.model_s != first


def test_a_sealed_runs_view_is_the_view_read_step_by_step(store, ids):
    from trainer import records

    # r200 as if it had ended: its steps read one by one, then from its sealed row.
    store.finish_run(ids["r200"], "done", now=NOW)
    read = ViewSource(store, home="h", clock=lambda: NOW, run_ref=ids["r200"]).build().current
    stats.seal(store, ids["r200"])
    source = ViewSource(store, home="h", clock=lambda: NOW, run_ref=ids["r200"])
    sealed = source.build().current
    assert sealed == read
    assert sealed.loss.points == 130 and len(sealed.loss.x) == 130
    # The plots and medians came from the sealed row, not from reading the steps.
    assert source._series[(ids["r200"], records.MAIN)].restored


def test_a_step_stored_after_the_seal_is_plotted_and_in_the_medians(store, ids):
    from trainer import records

    run = ids["r60"]
    stats.seal(store, run)
    source = ViewSource(store, home="h", clock=lambda: NOW, run_ref=run)
    assert source.build().current.step == 60
    store.add_steps(run, [records.Step("main", 61, 1.0, 50.0, 128, 1e-5, time=NOW)])
    view = source.build().current
    assert (view.step, view.loss.points) == (61, 61)
    steps = store.steps(run)
    assert view.median_s == stats.PassStats.of_steps(steps).median_step_s


def test_a_running_pass_is_first_read_from_the_plots_ingest_kept_not_step_by_step(store, ids):
    from daemon.run import plots
    from trainer import records

    run = ids["r200"]  # running, 130 main steps, none sealed
    whole = ViewSource(store, home="h", clock=lambda: NOW, run_ref=run).build().current
    plots.keep_plots(store, run, [records.MAIN, records.BASELINE])  # as ingest keeps them
    source = ViewSource(store, home="h", clock=lambda: NOW, run_ref=run)
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    kept = source.build().current
    store.conn.set_trace_callback(None)
    assert kept == whole
    # The steps after the kept plots' newest were asked for, and no earlier ones.
    series_reads = [s for s in seen if "FROM steps " in s and "step > " in s]
    assert series_reads and all("step > 130" in s for s in series_reads
                                if "'main'" in s), series_reads
    assert source._series[(run, records.MAIN)].restored
    # Steps that arrive later are plotted and in the medians, as a full read has them.
    store.add_steps(run, [records.Step("main", n, 1.5, 4.5, 128, 1e-5, time=NOW)
                          for n in range(131, 141)])
    view = source.build().current
    assert (view.step, view.loss.points) == (140, 140)
    assert view.median_s == stats.PassStats.of_steps(store.steps(run)).median_step_s


def test_points_taken_a_bucket_at_a_time_are_the_points_appended_one_by_one():
    import random

    rng = random.Random(3)
    ys = [rng.choice([1.0, 2.0, 3.0]) if rng.random() < 0.5 else rng.random() for _ in range(5000)]
    one, bulk = MinMaxBuckets(limit=20), MinMaxBuckets(limit=20)
    for x, y in enumerate(ys):
        one.append(x, y)
    i = 0
    while i < len(ys):  # in chunks of random size, as a refresh reads them
        k = rng.randint(1, 700)
        bulk.extend(list(range(i, min(i + k, len(ys)))), ys[i:i + k])
        i += k
    assert bulk.state() == one.state()


def test_the_step_time_plot_leaves_out_the_warm_up_steps_as_the_medians_do(store):
    # The plots take the first steady step from the store (daemon/run/plots.py), the
    # medians from daemon.stepmodel.stats: both must start at step 6.
    from daemon.run import plots
    from daemon.store import STEADY_FIRST
    from trainer import records

    assert STEADY_FIRST == stats.WARMUP_STEPS + 1
    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 12}, now=NOW)
    store.add_steps(run_id, [records.Step("main", n, 2.0, 9.0 if n <= 5 else 2.0, 128, 1e-5,
                                          time=NOW) for n in range(1, 13)])
    plot = plots.pass_plots(store, run_id, records.MAIN).time_plot.series()

    steady = stats.steady(store.steps(run_id))
    assert plot.x == tuple(s["step"] for s in steady) == tuple(range(6, 13))
    assert 9.0 not in plot.y
