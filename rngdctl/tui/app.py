"""`rngdctl tui`: the live monitor.

The app reads the store only. A thread worker builds a plain-data
``Snapshot`` (``rngdctl.tui.data``) once a second and posts it; the handler
copies it into the panels. Actions (cancel, hold, move, submit, export) run
in their own thread workers through ``Store`` request methods; the daemon does
the rest. Every worker error is handled in one place. A run's start, finish
and failure, and gates cleared after a long block, ring the bell and show a
toast (``rngdctl.tui.notices``); two marked history runs' losses open
overlaid (``widgets/overlay.py``).

Entry points: ``run_tui(home, run_id=None, read_only=False)`` and
``snapshot_text(home, ...)`` (one text frame, for ``--snapshot``).
"""

from __future__ import annotations

import asyncio
import gc
import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from rich.console import Console
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable, Footer
from textual.worker import Worker, WorkerFailed, WorkerState

from daemon.errors import RngdctlError
from daemon.home import Home
from daemon.store import DONE, FINISHED
from rngdctl.tui.actions import WriteActions
from rngdctl.tui.data import DaemonView, RunView, Snapshot, ViewSource, run_label
from rngdctl.tui.series import Series, overlay_series
from rngdctl.tui.smoothing import Smoothing
from rngdctl.tui.widgets import (
    CardsPanel,
    CurrentRunPanel,
    DaemonBar,
    EventsPanel,
    FilterBar,
    GatesPanel,
    HelpScreen,
    HistoryPanel,
    HoldersPanel,
    LogScreen,
    OverlayScreen,
    QueuePanel,
    ReplicasBar,
    RunDetailScreen,
)
from rngdctl.tui.widgets._update import set_if_changed

REFRESH_S = 1.0
#: Seconds a run's start, finish, failure or cleared gates stays on screen as a toast.
NOTICE_S = 30.0

#: Actions that write (to the store, or a note to disk): hidden by --read-only.
WRITE_ACTIONS = frozenset({"submit", "cancel_run", "toggle_hold", "move", "export"})
#: Actions that act on the main screen's panels.
MAIN_ACTIONS = WRITE_ACTIONS | {"filter", "log", "focus_panel", "toggle_pause"}

#: Panel number -> widget id, for the number keys (and the border titles).
PANELS = {1: "current", 2: "gates", 3: "queue", 4: "history", 5: "holders", 6: "cards"}
PANEL_TITLES = {"current": "current run", "gates": "gates", "queue": "queue",
                "history": "history", "holders": "device holders", "cards": "cards"}


class RngdApp(WriteActions, App[None]):
    """The monitor. ``clock`` is injectable so that tests and snapshots are exact."""

    CSS_PATH = "app.tcss"
    TITLE = "rngdctl"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (100, "-wide")]

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("slash", "filter", "Filter"),
        Binding("space", "toggle_pause", "Pause"),
        Binding("l", "log", "Log"),
        Binding("s", "submit", "Submit"),
        Binding("c", "cancel_run", "Cancel"),
        Binding("h", "toggle_hold", "Hold"),
        Binding("K,shift+up", "move(-1)", "Up", key_display="K"),
        Binding("J,shift+down", "move(1)", "Down", key_display="J"),
        Binding("e", "export", "Export"),
        *(Binding(str(n), f"focus_panel({n})", PANEL_TITLES[name], show=False)
          for n, name in PANELS.items()),
    ]

    paused: reactive[bool] = reactive(False)
    filter_text: reactive[str] = reactive("")

    @dataclass
    class Refreshed(Message):
        """A refresh worker read the store."""

        snapshot: Snapshot

    @dataclass
    class ActionDone(Message):
        """An action worker finished; ``message`` says what happened."""

        message: str

    @dataclass
    class DetailLoaded(Message):
        """A run's detail (view and note preview) is ready."""

        view: RunView
        note: str
        now: float

    @dataclass
    class OverlayReady(Message):
        """Two runs' loss curves, smoothed and downsampled, are ready to plot."""

        run_ids: tuple[int, int]
        smoothing: Smoothing
        curves: tuple[tuple[str, Series], ...]

    def __init__(self, home: Home | str | Path | None = None, *, run_ref: int | str | None = None,
                 read_only: bool = False, clock: Callable[[], float] = time.time,
                 export_dir: str | Path = "experiments", refresh_s: float = REFRESH_S,
                 freeze_gc: bool = False):
        super().__init__()
        self.home = home if isinstance(home, Home) else Home(home)
        self.run_ref = run_ref
        self.read_only = read_only
        self.clock = clock
        self.export_dir = Path(export_dir)
        self.refresh_s = refresh_s
        self.snapshot: Snapshot | None = None
        self.refresh_error: str | None = None
        self._source: ViewSource | None = None
        self._lock = threading.Lock()
        self._refreshing = False
        self._freeze_gc = freeze_gc

    # === layout ==============================================================

    def compose(self) -> ComposeResult:
        yield DaemonBar(id="daemon-bar")
        yield ReplicasBar(id="replicas-bar")
        with VerticalScroll(id="body"):
            with Horizontal(id="top"):
                yield CurrentRunPanel(id="current")
                with Vertical(id="side"):
                    yield GatesPanel(id="gates")
                    yield QueuePanel(id="queue")
            with Horizontal(id="bottom"):
                yield HistoryPanel(id="history")
                with Vertical(id="bottom-side"):
                    yield HoldersPanel(id="holders")
                    yield CardsPanel(id="cards")
                    yield EventsPanel(id="daemon-events")
        yield FilterBar(placeholder="filter runs and holders (Enter keeps, Esc clears)",
                        id="filter")
        yield Footer()

    def on_mount(self) -> None:
        for n, name in PANELS.items():
            self.query_one(f"#{name}").border_title = f"[{n}] {PANEL_TITLES[name]}"
        self.query_one(EventsPanel).border_title = "daemon events"
        self.query_one("#daemon-bar", DaemonBar).update("reading the store…")
        self.refresh_data()
        self.set_interval(self.refresh_s, self._tick)

    def _tick(self) -> None:
        if not self.paused and not self._refreshing:
            self.refresh_data()

    # === data ================================================================

    def _view_source(self) -> ViewSource:
        # Called with the lock held, in a worker thread: opening may migrate.
        if self._source is None:
            store = self.home.store()
            tick = self.home.config().daemon.tick
            self._source = ViewSource(store, home=self.home.path, run_ref=self.run_ref,
                                      clock=self.clock, tick=tick)
        return self._source

    @work(thread=True, exclusive=True, exit_on_error=False, group="refresh")
    def refresh_data(self) -> None:
        self._refreshing = True
        try:
            with self._lock:
                snapshot = self._view_source().build()
        finally:
            self._refreshing = False
        self.post_message(self.Refreshed(snapshot))

    @on(Refreshed)
    def show_snapshot(self, message: Refreshed) -> None:
        if not self.query(DaemonBar):
            # A refresh that finished while the app closes (--snapshot under load): the
            # panels are gone, nothing to show.
            return
        if self._freeze_gc and self.snapshot is None:
            # Everything alive after the first refresh (textual, rich, the widgets: about
            # 120,000 objects) lives as long as the app: keep it out of the collector's
            # full passes, which otherwise add 40 ms to every ninth frame.
            gc.freeze()
        self.snapshot = snapshot = message.snapshot
        self.refresh_error = None
        self._show_bar()
        self.query_one(ReplicasBar).show(snapshot.replicas)
        self.query_one(CurrentRunPanel).show(snapshot.current, snapshot.now)
        self.query_one(GatesPanel).show(snapshot.gates, snapshot.now)
        self.query_one(QueuePanel).show(snapshot.queue, self.filter_text, snapshot.now)
        self.query_one(HistoryPanel).show(snapshot.history, snapshot.now, self.filter_text)
        self.query_one(HoldersPanel).show(snapshot.holders, snapshot.holders_time,
                                          snapshot.now, self.filter_text)
        self.query_one(CardsPanel).show(snapshot.cards, snapshot.now)
        self.query_one("#bottom").set_class(bool(snapshot.cards), "-with-cards")
        self.query_one(EventsPanel).show(snapshot.daemon_events)
        self._ring(snapshot)
        current = snapshot.current
        set_if_changed(self.query_one(CurrentRunPanel), "border_title", (
            "[1] current run" + (f" {run_label({'id': current.run_id, 'name': current.name})}"
                                 if current else "")))

    def _ring(self, snapshot: Snapshot) -> None:
        """The bell once and a toast each for the runs' start, finish, failure and cleared
        gates since the last refresh (rngdctl/tui/notices.py)."""
        if not snapshot.notices:
            return
        self.bell()
        for notice in snapshot.notices:
            # markup=False: a failure's reason may hold brackets ("[Errno 2] ...").
            self.notify(notice.message, title=notice.title, severity=notice.severity,
                        timeout=NOTICE_S, markup=False)

    def _show_bar(self) -> None:
        if self.snapshot is None and self.refresh_error is None:
            return
        view = (self.snapshot.daemon if self.snapshot
                else DaemonView("never", home=str(self.home.path)))
        self.query_one(DaemonBar).show(view, paused=self.paused, read_only=self.read_only,
                                       filter_text=self.filter_text, error=self.refresh_error,
                                       notice=self.notice())

    def notice(self) -> str | None:
        """A line that leads the bar, saying what to do next; none in the monitor."""
        return None

    def watch_paused(self) -> None:
        self._show_bar()
        self.refresh_bindings()

    def watch_filter_text(self) -> None:
        if self.snapshot is not None:  # shown again, filtered: its notices were told once
            self.post_message(self.Refreshed(replace(self.snapshot, notices=())))

    @on(Worker.StateChanged)
    def worker_failed(self, event: Worker.StateChanged) -> None:
        """The one place worker errors land: a line in the bar, a notification once."""
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        message = str(error) if isinstance(error, RngdctlError) else (
            f"{type(error).__name__}: {error}")
        if event.worker.group == "refresh":
            if message != self.refresh_error:
                self.notify(message, title="cannot read the store", severity="error")
            self.refresh_error = message
            self._show_bar()
        else:
            self.notify(message, title=f"{event.worker.name} failed", severity="error")

    # === keys: panels, help, pause, filter, log ==============================

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if self.read_only and action in WRITE_ACTIONS:
            return False
        # On a dialog or the detail screen, the main panels' keys do nothing.
        return not (action in MAIN_ACTIONS and len(self.screen_stack) > 1)

    def action_focus_panel(self, number: int) -> None:
        panel = self.query_one(f"#{PANELS[number]}")
        tables = panel.query(DataTable)
        (tables.first() if tables else panel).focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(read_only=self.read_only))

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self.refresh_data()

    def action_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.add_class("shown")
        bar.focus()

    @on(FilterBar.Changed)
    def filter_changed(self, event: FilterBar.Changed) -> None:
        self.filter_text = event.value.strip()

    @on(FilterBar.Closed)
    def filter_closed(self, message: FilterBar.Closed) -> None:
        self.filter_text = message.text
        bar = self.query_one(FilterBar)
        bar.remove_class("shown")
        self.action_focus_panel(3)

    def _panel_of_focus(self) -> str | None:
        focused = self.focused
        if focused is None:
            return None
        for node in focused.ancestors_with_self:
            if isinstance(node, Widget) and node.id in PANELS.values():
                return node.id
        return None

    def selected_run(self) -> int | None:
        """The run an action applies to: the queue's or history's cursor row when that
        panel has focus, else the current run."""
        panel = self._panel_of_focus()
        if panel == "queue":
            return self.query_one(QueuePanel).selected_run
        if panel == "history":
            return self.query_one(HistoryPanel).selected_run
        current = self.snapshot.current if self.snapshot else None
        return current.run_id if current else None

    def _describe(self, run_id: int) -> str:
        snap = self.snapshot
        if snap is not None:
            if snap.current and snap.current.run_id == run_id:
                return (f"{run_label({'id': run_id, 'name': snap.current.name})} "
                        f"({snap.current.status})")
            for row in snap.queue:
                if row.run_id == run_id:
                    return f"{run_label({'id': run_id, 'name': row.name})} (queued)"
            for row in snap.history:
                if row.run_id == run_id:
                    return f"{run_label({'id': run_id, 'name': row.name})} ({row.status})"
        return f"#{run_id}"

    def action_log(self) -> None:
        run_id = self.selected_run()
        if run_id is None:
            self.notify("no run selected", severity="warning")
            return
        self._open_log(run_id)

    @work(thread=True, exit_on_error=False, group="action", name="log")
    def _open_log(self, run_id: int) -> None:
        with self._lock:
            run = self._view_source().store.run(run_id)
        self.call_from_thread(self.push_screen,
                              LogScreen(f"log of {self._describe(run_id)}", run.get("log_path")))

    # === history: detail ======================================================

    @on(HistoryPanel.Opened)
    def open_detail(self, message: HistoryPanel.Opened) -> None:
        self.push_screen(RunDetailScreen(message.run_id))
        self.load_detail(message.run_id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="detail", name="detail")
    def load_detail(self, run_id: int) -> None:
        from rngdctl import export

        with self._lock:
            source = self._view_source()
            now = self.clock()
            view = source.run_view(source.store.run(run_id), now)
            reports = export.build(source.store, [run_id])
        note = export.render(reports, slug=export.note_slug(reports), now=now)
        self.post_message(self.DetailLoaded(view, note, now))

    @on(DetailLoaded)
    def show_detail(self, message: DetailLoaded) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, RunDetailScreen) and screen.run_id == message.view.run_id:
                screen.show(message.view, message.note, message.now)

    # === history: two runs' losses overlaid =====================================

    @on(HistoryPanel.OverlayAsked)
    def open_overlay(self, message: HistoryPanel.OverlayAsked) -> None:
        screen = OverlayScreen(message.run_ids)
        self.push_screen(screen)
        self.load_overlay(message.run_ids, screen.smoothing)

    @on(OverlayScreen.SmoothingChanged)
    def smoothing_changed(self, message: OverlayScreen.SmoothingChanged) -> None:
        self.load_overlay(message.run_ids, message.smoothing)

    @work(thread=True, exclusive=True, exit_on_error=False, group="overlay", name="overlay")
    def load_overlay(self, run_ids: tuple[int, int], smoothing: Smoothing) -> None:
        with self._lock:
            curves = self._view_source().loss_curves(run_ids)
        self.post_message(self.OverlayReady(
            run_ids, smoothing, tuple((c.label, overlay_series(c, smoothing)) for c in curves)))

    @on(OverlayReady)
    def show_overlay(self, message: OverlayReady) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, OverlayScreen) and screen.run_ids == message.run_ids:
                screen.show(message.smoothing, message.curves)

    # === actions (hidden by --read-only; the keys' methods are in actions.py) ===

    @work(thread=True, exit_on_error=False, group="action")
    def write_store(self, fn: Callable[[ViewSource], str]) -> None:
        """Run one write against the store in a thread; report what it did."""
        with self._lock:
            message = fn(self._view_source())
        self.post_message(self.ActionDone(message))

    @on(ActionDone)
    def action_done(self, message: ActionDone) -> None:
        self.notify(message.message)
        self.refresh_data()

    # === a text frame =========================================================

    def frame_text(self) -> str:
        """The screen as plain text, as a person would see it."""
        width, height = self.size
        console = Console(width=width, height=height, file=io.StringIO(), record=True,
                          color_system=None, legacy_windows=False, safe_box=False)
        console.print(self.screen._compositor.render_update(
            full=True, screen_stack=self._background_screens))
        return "\n".join(line.rstrip() for line in console.export_text().splitlines())


#: What ``run_tui(..., demo=True)`` returns when Ctrl-C closed it.
INTERRUPTED = "interrupted"


class DemoApp(RngdApp):
    """``make demo``'s monitor of its one run: Ctrl-C closes it saying so (the demo then
    cancels the run, as in plain lines), and the run's end says that q gives the rest."""

    # Textual reads Ctrl-C as a key (the terminal is raw), not as SIGINT; priority: an
    # input's copy binding must not take it.
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("ctrl+c", "interrupt", "Stop the demo", show=False, priority=True)]

    def action_interrupt(self) -> None:
        self.exit(INTERRUPTED)

    def notice(self) -> str | None:
        current = self.snapshot.current if self.snapshot else None
        if current is None or current.status not in FINISHED:
            return None
        if current.status == DONE:
            return "done: q for the note and the model"
        return f"{current.status}: q for the note"


def run_tui(home: Home | str | Path | None = None, run_id: int | str | None = None,
            read_only: bool = False, demo: bool = False) -> str | None:
    """Open the monitor on ``home`` (for ``rngdctl tui`` and ``make demo``, ``demo=True``:
    then INTERRUPTED when Ctrl-C closed it)."""
    app = DemoApp if demo else RngdApp
    return app(home, run_ref=run_id, read_only=read_only, freeze_gc=True).run()


def snapshot_text(home: Home | str | Path | None = None, run_id: int | str | None = None, *,
                  read_only: bool = False, size: tuple[int, int] = (120, 40),
                  clock: Callable[[], float] = time.time) -> str:
    """One frame of the monitor as text, after its first refresh."""

    async def frame() -> str:
        app = RngdApp(home, run_ref=run_id, read_only=read_only, clock=clock)
        async with app.run_test(size=size) as pilot:
            try:
                await app.workers.wait_for_complete()
            except WorkerFailed:
                pass  # worker_failed() has put it in refresh_error
            await pilot.pause()
            if app.refresh_error:
                raise RngdctlError(app.refresh_error)
            return app.frame_text()

    return asyncio.run(frame())
