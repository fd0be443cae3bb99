"""The monitor's write actions: cancel, hold, move, submit and export.

Each one asks (or checks the selection) on the UI thread and hands one write
to ``RngdApp.write_store``, a thread worker; the daemon does the rest.
``--read-only`` hides them all (``RngdApp.check_action``).
"""

from __future__ import annotations

from textual.widgets import DataTable

from rngdctl.tui.data import ViewSource
from rngdctl.tui.widgets import ConfirmScreen, QueuePanel, SubmitScreen


class WriteActions:
    """The write actions of ``RngdApp``, kept apart from its layout and refresh."""

    def action_cancel_run(self) -> None:
        run_id = self.selected_run()
        if run_id is None:
            self.notify("no run selected", severity="warning")
            return
        label = self._describe(run_id)

        def answered(yes: bool | None) -> None:
            if not yes:
                self.notify(f"{label}: not cancelled")
                return

            def cancel(source: ViewSource) -> str:
                outcome = source.store.request_cancel(run_id, now=self.clock())
                return {"cancelled": f"{label}: cancelled",
                        "requested": f"{label}: cancel requested; the daemon stops it"
                        }.get(outcome, f"{label}: already {outcome}, nothing to cancel")

            self.write_store(cancel)

        self.push_screen(ConfirmScreen(f"Cancel run {label}?"), answered)

    def _queued_selection(self) -> int | None:
        if self._panel_of_focus() != "queue":
            self.notify("select a run in the queue (3) first", severity="warning")
            return None
        run_id = self.query_one(QueuePanel).selected_run
        if run_id is None:
            self.notify("the queue is empty", severity="warning")
        return run_id

    def action_toggle_hold(self) -> None:
        run_id = self._queued_selection()
        if run_id is None:
            return
        held = next((r.held for r in self.snapshot.queue if r.run_id == run_id), False)
        label = self._describe(run_id)

        def hold(source: ViewSource) -> str:
            source.store.set_held(run_id, not held)
            return f"{label}: {'released' if held else 'held'}"

        self.write_store(hold)

    def action_move(self, delta: int) -> None:
        run_id = self._queued_selection()
        if run_id is None:
            return
        label = self._describe(run_id)
        table = self.query_one("#queue-table", DataTable)
        target = max(0, min(table.row_count - 1, table.cursor_row + delta))

        def move(source: ViewSource) -> str:
            source.store.move(run_id, delta)
            return f"{label}: moved {'up' if delta < 0 else 'down'}"

        table.move_cursor(row=target, animate=False)
        self.write_store(move)

    def action_submit(self) -> None:
        def submitted(config: dict | None) -> None:
            if config is None:
                return

            def add(source: ViewSource) -> str:
                from daemon.scheduling.queueing import queue_run

                # submit's own path: a name is one run's, an --out another run names is not
                run_id = queue_run(source.store, config, now=self.clock())
                return f"queued run #{run_id}"

            self.write_store(add)

        from daemon.run.host_fit import Host

        # what the home's launcher can run: its memory, the furiosa package (as submit)
        self.push_screen(SubmitScreen(host=Host.of(self.home.config())), submitted)

    def action_export(self) -> None:
        run_id = self.selected_run()
        if run_id is None:
            self.notify("no run selected", severity="warning")
            return
        self.export_run(run_id)

    def export_run(self, run_id: int) -> None:
        out = self.export_dir
        label = self._describe(run_id)

        def export_note(source: ViewSource) -> str:
            from rngdctl.export import write_note

            note = write_note(source.store, [run_id], out)
            return f"{label}: note written to {note}"

        self.write_store(export_note)
