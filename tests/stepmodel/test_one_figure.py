"""One run, one error: the TUI's run and history panels, `show` and the note give the error
of one comparison (stepmodel.for_run), against one measured step, under its own name."""

from __future__ import annotations

import json

from synthetic_logs import make_pass
from test_interleaved_window import interleave

from daemon import stepmodel
from daemon.stepmodel import stats
from rngdctl.export import secs, write_note
from rngdctl.tui.data import ViewSource
from trainer import records

NOW = 1_790_000_000.0


def hogged_run(store, recorded_run) -> int:
    """An interleaved run on a host that got twice as slow half-way: the paired estimate
    of its step and the median of its steps then differ by far more than rounding."""
    baseline = make_pass(cards=2, steps=40, raw=False)
    main = make_pass(cards=2, resident_per_card=4, steps=40, label="main", raw=False)
    baseline, main = interleave(baseline, main, 2, 45, 2.0)
    run = recorded_run(baseline, main, main_config={"interleave": 2},
                       config={"cards": 2, "resident": 4, "steps": 40, "baseline": True,
                               "interleave": 2, "model": "llama-3.1-8b-mini",
                               "backend": "cpu"})
    store.finish_run(run, "done", now=NOW - 60)
    return run


def test_the_history_and_run_panels_give_the_error_show_gives_against_the_named_figure(
        store, recorded_run):
    run = hogged_run(store, recorded_run)
    c = stepmodel.for_run(store, run)
    median = stats.pass_stats(store, run, records.MAIN).median_step_s
    assert c.paired and abs(c.measured_s / median - 1) > 0.05  # two figures, far apart

    snapshot = ViewSource(store, home="h", clock=lambda: NOW, run_ref=run).build()

    [row] = snapshot.history
    assert (row.error, row.measured_s, row.measured_name) == (c.error, c.measured_s,
                                                               "paired estimate")
    assert row.median_s == median  # the median stays, under its own name
    current = snapshot.current
    assert (current.error, current.measured_s, current.measured_name) == (
        c.error, c.measured_s, "paired estimate")


def test_show_and_the_note_name_the_paired_estimate_and_never_call_it_a_median(
        store, recorded_run, rngdctl, tmp_path):
    run = hogged_run(store, recorded_run)
    c = stepmodel.for_run(store, run)
    window = "steps 6-40, interleaved with the baseline in blocks of 2"

    _, text, _ = rngdctl("show", str(run))
    _, out, _ = rngdctl("show", str(run), "--json")
    note = write_note(store, [run], tmp_path, now=NOW).read_text()

    assert f"measured {secs(c.measured_s)} (paired estimate of {window}), error" in text
    model = json.loads(out)["model"]
    assert (model["error"], model["measured_name"]) == (c.error, "paired estimate")
    assert f"measured is the paired estimate of {window} (the steps'" in note
    assert f"| {secs(c.measured_s)} | paired estimate of {window} |" in note
    assert f"median of {window}" not in note + text


def test_the_phase_column_of_show_is_each_phases_share_of_the_error(store, recorded_run,
                                                                    rngdctl):
    run = hogged_run(store, recorded_run)
    code, text, err = rngdctl("show", str(run))
    assert code == 0, err
    [header] = [line for line in text.splitlines() if line.split()[:1] == ["phase"]]
    assert header.split() == ["phase", "model", "measured", "share", "of", "error"]
