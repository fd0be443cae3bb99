"""The queue panel: each queued run's position, estimated start and end, and what the
estimate rests on; no estimate, and why, for a run whose model has no baseline."""

from __future__ import annotations

import time

from tui_support import NOW, table_rows, text_of

from daemon.run.spec import validate
from daemon.scheduling.estimate import queue_estimates


def _clock(t: float) -> str:
    return "~" + time.strftime("%H:%M", time.localtime(t))


async def test_each_queued_run_shows_its_position_and_estimated_start_and_end(make_app, settle,
                                                                          store, ids):
    [head, _held] = queue_estimates(store, NOW)
    assert head.start is not None  # the recorded session has a baseline for tiny-llama

    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rows = table_rows(pilot.app, "#queue-table")

    assert [r[:5] for r in rows] == [
        ["4", "#4 next", "◷ queued", _clock(head.start), _clock(head.end)],
        ["5", "#5 later", "⏸ held", "–", "–"],
    ]
    assert rows[0][5:8] == ["2", "8", "200 +base"]


async def test_the_selected_runs_estimate_says_what_it_rests_on(make_app, settle, store):
    [head, _held] = queue_estimates(store, NOW)

    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        first = " ".join(text_of(pilot.app, "#queue-basis").split())
        await pilot.press("down")
        await settle(pilot)
        second = " ".join(text_of(pilot.app, "#queue-basis").split())

    assert first.startswith(f"#4 next: start {_clock(head.start)}, end {_clock(head.end)}; "
                            "rests on: run 3 (active): 70 steps left x 4430.0 ms measured")
    assert second == "#5 later: held: no estimate"


async def test_a_run_whose_model_has_no_baseline_gets_no_estimate_and_says_so(make_app, settle,
                                                                             store, ids):
    store.set_held(ids["later"], False)
    odd = store.add_run(validate({"cards": 1, "resident": 0, "steps": 100,
                                  "model": "tiny-qwen2"}), name="odd", now=NOW - 60)

    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rows = table_rows(pilot.app, "#queue-table")
        await pilot.press("3", "down", "down")
        await settle(pilot)
        basis = " ".join(text_of(pilot.app, "#queue-basis").split())
        subtitle = pilot.app.query_one("#queue").border_subtitle

    assert [r[1] for r in rows] == ["#4 next", "#5 later", f"#{odd} odd"]
    assert rows[2][3:5] == ["–", "–"] and rows[1][3] != "–"
    assert basis.startswith(f"#{odd} odd: no estimate: no baseline for model 'tiny-qwen2'")
    assert subtitle == "3 queued, 1 without estimate"


async def test_a_newly_queued_run_gets_its_estimate_at_the_next_refresh(make_app, settle, store):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        new = store.add_run(validate({"cards": 1, "resident": 2, "steps": 50}), name="new",
                            now=NOW)
        pilot.app.refresh_data()
        await settle(pilot)
        rows = table_rows(pilot.app, "#queue-table")

    estimate = {e.run_id: e for e in queue_estimates(store, NOW)}[new]
    assert rows[-1][1:5] == [f"#{new} new", "◷ queued", _clock(estimate.start),
                             _clock(estimate.end)]


async def test_a_long_queue_shows_its_head_and_the_filter_finds_a_run_further_back(make_app,
                                                                                  settle, store):
    from rngdctl.tui.widgets.queue import SHOWN

    sweep = [store.add_run(validate({"cards": 1, "resident": 0, "steps": 10 + i}),
                           name=f"sweep-{i}", now=NOW) for i in range(SHOWN + 50)]
    queued = len(store.queue())

    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        head = table_rows(pilot.app, "#queue-table")
        subtitle = pilot.app.query_one("#queue").border_subtitle
        await pilot.press("slash", *f"sweep-{SHOWN + 40}", "enter")
        await settle(pilot)
        found = table_rows(pilot.app, "#queue-table")

    assert len(head) == SHOWN and head[0][0] == "4"  # the head of the queue, in launch order
    assert subtitle.startswith(f"{queued} queued, the first {SHOWN} shown")
    assert [r[1] for r in found] == [f"#{sweep[SHOWN + 40]} sweep-{SHOWN + 40}"]
