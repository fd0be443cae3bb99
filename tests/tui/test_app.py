"""Pilot tests: the panels show the recorded session's numbers, and the actions behave."""

from __future__ import annotations

import pytest
from textual.widgets import Input
from tui_support import NOW, T0, fill, table_rows, text_of

from daemon import stepmodel
from daemon.store import Store
from rngdctl.tui.app import RngdApp
from rngdctl.tui.widgets import ConfirmScreen, RunDetailScreen, SubmitScreen


async def test_current_run_shows_progress_eta_median_tok_s_and_model_error(make_app, settle,
                                                                          store, ids):
    comparison = stepmodel.for_run(store, ids["r200"])
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        summary = text_of(pilot.app, "#run-summary")
    assert "#3 r200" in summary and "▶ running" in summary
    assert "step 130 of 200 (65%)" in summary
    assert "ETA 5 m" in summary  # 70 steps left x 4.43 s
    assert "median 6–N 4.430 s" in summary
    assert "462 tok/s" in summary  # 2048 tokens / 4.43 s
    # The error against the figure it is taken from, named, with the verdict's interval.
    assert (f"model {comparison.model_s:.3f} s vs {comparison.measured_name} "
            f"{comparison.measured_s:.3f} s · error {comparison.error * 100:+.1f} % "
            f"±{comparison.interval * 100:.1f} % at 95 %") in " ".join(summary.split())


async def test_current_run_shows_the_last_steps_phases_in_trainer_order(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        phases = text_of(pilot.app, "#run-phases")
    lines = [line.split()[0] for line in phases.splitlines()[2:]]
    assert lines == ["fwd_bwd", "upload", "download", "host_optim", "device_optim", "wait"]
    assert "2.400 49%" in phases  # host_optim: 2.4 s of the 4.9 s step 130


async def test_gates_say_how_long_and_by_what_the_head_of_the_queue_is_blocked(make_app,
                                                                             settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        blocked = " ".join(text_of(pilot.app, "#gates-blocked").split())
        gates = text_of(pilot.app, "#gates-table")
    assert blocked.startswith("✗ #4 next blocked 14 m: pid 4121 python bench.py (kim) holds "
                              "/dev/rngd/npu0pe0-3")
    assert "✗ device_idle" in gates and "✓ host_load" in gates and "– cards_free" in gates


async def test_queue_lists_runs_in_launch_order_with_held_marked(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rows = table_rows(pilot.app, "#queue-table")
    assert [r[:3] + r[5:8] for r in rows] == [  # r[3:5]: test_queue_estimates.py
        ["4", "#4 next", "◷ queued", "2", "8", "200 +base"],
        ["5", "#5 later", "⏸ held", "1", "4", "100"],
    ]


async def test_history_shows_finished_runs_with_steps_and_median(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rows = table_rows(pilot.app, "#history-table")
    assert [r[:5] for r in rows] == [
        ["#2 oom-try", "✗ oom", "12/200", "5.500 s", "372"],
        ["#1 r60", "✓ done", "60/60", "2.000 s", "64"],
    ]


async def test_holders_show_pid_user_age_and_card(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rows = table_rows(pilot.app, "#holders-table")
    assert rows == [["4121", "kim", "15 m", "npu0", "–", "–", "–", "python bench.py"]]


async def test_holders_show_the_pod_and_run_and_mark_orphans_and_phantoms(make_app, settle,
                                                                          store):
    store.add_sample(load=(3.0, 2.5, 2.0), now=NOW, holders=[
        {"pid": 77, "user": "root", "command": "python -m trainer train", "cards": ["npu1"],
         "pod": "ml/rngd-7-a0-x", "job": "rngd-7-a0", "run": 7, "started": NOW - 60,
         "mark": ""},
        {"pid": 4121, "user": "kim", "command": "python bench.py", "cards": ["npu0"],
         "orphan": "in no pod", "started": NOW - 900, "mark": "orphan"},
        {"pid": None, "user": "–", "command": "no process holds a device file",
         "cards": ["1 card"], "pod": "inference/serving-0", "phantom": True,
         "started": NOW - 1200, "mark": "phantom"},
    ])
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rows = table_rows(pilot.app, "#holders-table")
        subtitle = pilot.app.query_one("#holders").border_subtitle
    assert [r[:7] for r in rows] == [
        ["77", "root", "1 m", "npu1", "ml/rngd-7-a0-x", "#7", "–"],
        ["4121", "kim", "15 m", "npu0", "–", "–", "orphan"],
        ["–", "–", "20 m", "1 card", "inference/serving-0", "–", "phantom"],
    ]
    assert subtitle.startswith("2 holders, 1 orphan, 1 phantom")


async def test_the_latest_daemon_events_are_shown_newest_last(make_app, settle, store):
    store.add_event(None, "daemon", "daemon started (pid 11, launcher k8s)", now=NOW - 300)
    store.add_event(7, "requeue", "a run's own event is not a daemon event", now=NOW - 200)
    store.add_event(None, "k8s_unavailable", "list_pods: no answer\nsecond line", now=NOW - 100)
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = str(pilot.app.query_one("#events-text").content)
    lines = text.splitlines()
    assert lines[-2].endswith("daemon: daemon started (pid 11, launcher k8s)")
    assert lines[-1].endswith("k8s_unavailable: list_pods: no answer")
    assert "requeue" not in text


async def test_header_says_when_no_daemon_runs_and_since_when(make_app, settle, store):
    store.daemon_stopped("SIGTERM", now=NOW - 600)
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        bar = text_of(pilot.app, "#daemon-bar")
    assert bar.startswith("○ no daemon running · stopped 2026-09-21 16:03 (SIGTERM)")


async def test_an_empty_home_shows_dashes_not_an_exception(tmp_path, settle):
    app = RngdApp(tmp_path / "empty", clock=lambda: NOW, refresh_s=3600)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.refresh_error is None
        assert "none has run in this home" in text_of(app, "#daemon-bar")
        assert "no run yet" in text_of(app, "#run-summary")


async def test_cancel_asks_and_enter_keeps_the_run(make_app, settle, store, ids):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3", "c")
        assert isinstance(pilot.app.screen, ConfirmScreen)
        assert pilot.app.screen.focused.id == "no"
        await pilot.press("enter")
        await settle(pilot)
    assert store.run(ids["next"])["status"] == "queued"


async def test_cancel_confirmed_with_y_cancels_the_selected_queued_run(make_app, settle, store,
                                                                       ids):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3", "c", "y")
        await settle(pilot)
    assert store.run(ids["next"])["status"] == "cancelled"
    assert store.run(ids["later"])["status"] == "queued"


async def test_cancel_on_the_current_run_asks_the_daemon_to_stop_it(make_app, settle, store,
                                                                    ids):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("1", "c")
        await pilot.click("#yes")
        await settle(pilot)
    assert store.run(ids["r200"])["cancel_requested"] == 1


async def test_hold_and_move_act_on_the_selected_queued_run(make_app, settle, store, ids):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3", "h")
        await settle(pilot)
        assert store.run(ids["next"])["held"] == 1
        await pilot.press("J")
        await settle(pilot)
    assert [r["id"] for r in store.queue()] == [ids["later"], ids["next"]]


@pytest.mark.parametrize(("field", "value", "error"), [
    ("cards", "0", "--cards must be >= 1, got 0"),
    ("cards", "two", "--cards must be a whole number, got 'two'"),
    ("model", "no-such-model", "--model 'no-such-model' is neither a known model"),
])
async def test_the_submit_form_rejects_bad_values_and_stays_open(make_app, settle, store,
                                                                field, value, error):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        form = pilot.app.screen
        assert isinstance(form, SubmitScreen)
        form.query_one("#field-cards", Input).value = "1"
        form.query_one("#field-resident", Input).value = "2"
        form.query_one(f"#field-{field}", Input).value = value
        await pilot.click("#submit")
        await pilot.pause()
        assert pilot.app.screen is form
        assert error in text_of(form, "#submit-error")
    assert len(store.queue()) == 2


async def test_the_submit_form_queues_a_valid_run(make_app, settle, store):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        form = pilot.app.screen
        form.query_one("#field-cards", Input).value = "1"
        form.query_one("#field-resident", Input).value = "2"
        form.query_one("#field-steps", Input).value = "30"
        form.query_one("#field-name", Input).value = "from-tui"
        await pilot.click("#submit")
        await settle(pilot)
    newest = store.queue()[-1]
    assert (newest["name"], newest["config"]["steps"], newest["config"]["cards"]) == (
        "from-tui", 30, 1)


async def test_the_submit_form_refuses_a_model_this_host_cannot_hold(make_app, settle, store,
                                                                      tmp_path):
    # The form checks what `rngdctl submit` checks against the home's launcher: here the
    # host's memory, which no 405B-sized model fits.
    from tests.model_configs import LLAMA_405B, model_folder

    before = len(store.runs())
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        form = pilot.app.screen
        form.query_one("#field-cards", Input).value = "1"
        form.query_one("#field-model", Input).value = str(model_folder(tmp_path, LLAMA_405B))
        await pilot.click("#submit")
        await pilot.pause()
        assert pilot.app.screen is form
        assert "GB of host memory" in text_of(form, "#submit-error")
    assert len(store.runs()) == before


async def test_read_only_hides_every_action(make_app, settle, store, ids):
    async with make_app(read_only=True).run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        shown = {b.binding.action for b in pilot.app.active_bindings.values()
                 if b.enabled and b.binding.show}
        await pilot.press("3", "c", "h", "s", "e")
        await settle(pilot)
        assert not isinstance(pilot.app.screen, ConfirmScreen | SubmitScreen)
    assert not shown & {"submit", "cancel_run", "toggle_hold", "move(-1)", "move(1)", "export"}
    assert {"help", "quit", "filter"} <= shown
    assert store.run(ids["next"])["status"] == "queued"
    assert store.run(ids["next"])["held"] == 0


async def test_filter_narrows_the_tables(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"later", "enter")
        await settle(pilot)
        queue = table_rows(pilot.app, "#queue-table")
        history = table_rows(pilot.app, "#history-table")
    assert [r[1] for r in queue] == ["#5 later"]
    assert history == []


async def test_space_pauses_the_refresh(make_app, settle, store, ids):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("space")
        store.add_run({"cards": 1, "resident": 0, "steps": 5, "model": "tiny-llama"},
                      name="while-paused", now=NOW)
        pilot.app._tick()
        await settle(pilot)
        assert "⏸ paused" in text_of(pilot.app, "#daemon-bar")
        assert len(table_rows(pilot.app, "#queue-table")) == 2
        await pilot.press("space")
        await settle(pilot)
        assert len(table_rows(pilot.app, "#queue-table")) == 3


async def test_enter_on_history_opens_the_run_with_its_note(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4", "down", "enter")  # the second row: #1 r60
        await settle(pilot)
        detail = pilot.app.screen
        assert isinstance(detail, RunDetailScreen) and detail.run_id == 1
        assert "60 of 60" in text_of(detail, "#detail-summary")
        markdown = detail.query_one("#detail-markdown").source
    assert markdown.startswith("# r60")


async def test_e_exports_the_selected_runs_note(make_app, settle, tmp_path):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4", "e")
        await settle(pilot)
    notes = list((tmp_path / "experiments").glob("*.md"))
    assert len(notes) == 1 and "oom-try" in notes[0].name


async def test_help_lists_the_keys(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        help_text = text_of(pilot.app.screen, "#help-keys")
    assert "cancel the selected run" in help_text


async def test_a_store_from_a_newer_rngdctl_is_one_line_not_a_crash(tmp_path, settle):
    home = tmp_path / "home"
    with Store(home / "rngdctl.db") as store:
        store.conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    app = RngdApp(home, clock=lambda: NOW, refresh_s=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "schema version 99" in app.refresh_error
        assert "schema version 99" in text_of(app, "#daemon-bar")


def test_fill_builds_the_recorded_session(store):
    ids = fill(store)
    assert [r["status"] for r in store.runs()] == ["queued", "queued", "running", "oom", "done"]
    assert store.step_counts(ids["r200"]) == {"baseline": 10, "main": 130}
    assert store.runs()[-1]["created"] == T0



async def test_l_shows_the_current_runs_log_tail(make_app, settle, store, ids, tmp_path):
    log = tmp_path / "r200.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 20_001)))
    store.update_run(ids["r200"], log_path=str(log))
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("1", "l")
        await settle(pilot)
        lines = list(pilot.app.screen.query_one("#log-view").lines)
    assert lines[-1] == "line 20000"
    assert lines[0].startswith("line ") and len(lines) < 20_000  # the last 64 KiB only


async def test_number_keys_and_tab_move_between_panels(make_app, settle):
    async with make_app().run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        assert pilot.app.focused.id == "history-table"
        await pilot.press("tab")
        assert pilot.app.focused.id == "holders-table"
        await pilot.press("2")
        assert pilot.app.focused.id == "gates"
