"""The current run's output folder, resumes and held-out loss in the monitor (issue 26)."""

from __future__ import annotations

from tui_support import NOW, text_of

from daemon.run.ingest import Ingest
from rngdctl.tui.data import ViewSource
from trainer import records


def test_the_held_out_loss_is_a_second_series_beside_the_train_loss(store, ids):
    view = ViewSource(store, home="h", clock=lambda: NOW).build().current
    assert view.held_out.x == (0, 25, 50, 75, 100, 125)  # the recorded evals, every 25 steps
    assert view.held_out.y[-1] == 2.1 - 125 / 400
    assert (view.held_out_step, view.held_out_loss) == (125, 2.1 - 125 / 400)
    assert view.loss.points == 130  # the train loss's own series is unchanged


def test_a_new_held_out_loss_is_plotted_at_the_next_refresh(store, ids):
    source = ViewSource(store, home="h", clock=lambda: NOW)
    source.build()
    Ingest(store).feed(ids["r200"], [records.dumps(records.Eval(
        records.MAIN, 150, 1.70, 4096, 64, 0.8, time=NOW))])
    view = source.build().current
    assert view.held_out.x[-1] == 150 and view.held_out.points == 7
    assert (view.held_out_step, view.held_out_loss) == (150, 1.70)


def test_a_resume_shows_in_the_panel_once_its_event_is_stored(store, ids):
    source = ViewSource(store, home="h", clock=lambda: NOW)
    assert source.build().current.resumes is None
    Ingest(store).feed(ids["r200"], [records.dumps(records.Event(
        records.RESUME, "resumed", data={"path": "/scratch/kim/r200/checkpoints/step-100",
                                         "step": 100}, time=NOW - 10))])
    # r200's 30 steps past step 100 were stored before the resume's time.
    assert source.build().current.resumes == "resumed once: from step 100, 30 steps again"


async def test_the_panel_names_the_output_folder_and_the_newest_held_out_loss(make_app,
                                                                              settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        summary = " ".join(text_of(pilot.app, "#run-summary").split())
        plot = text_of(pilot.app, "#run-plots .loss-plot")
    assert "output /scratch/kim/r200 (full weights, not written yet)" in summary
    assert "held-out 1.7875 at step 125" in summary
    assert "loss ● held-out · 130 steps" in plot
