"""The current run: progress, speed against the model, plots, phases and events."""

from __future__ import annotations

import time

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from rngdctl.tui.data import RunView, ago, num, percent, run_label, status_text
from rngdctl.tui.widgets._update import update_if_changed
from rngdctl.tui.widgets.run_plots import RunPlots
from rngdctl.tui.widgets.series_plot import HELD_OUT_COLOR

HELD_OUT_STYLE = f"bold {HELD_OUT_COLOR}"

STATUS_STYLES = {"running": "bold green", "launching": "bold green", "done": "green",
                 "failed": "bold red", "oom": "bold red", "timeout": "bold red",
                 "cancelled": "yellow", "queued": "yellow"}


def progress_bar(done: int, total: int | None, width: int = 20) -> str:
    if not total:
        return ""
    filled = min(width, int(width * done / total))
    return "█" * filled + "░" * (width - filled)


def config_line(config: dict) -> str:
    cards, resident = config.get("cards"), config.get("resident", config.get("resident_layers"))
    placement = (f"{'–' if cards is None else cards} card{'' if cards == 1 else 's'}"
                 f" × {'–' if resident is None else resident} resident")
    parts = [str(config.get("model") or "–"), placement]
    if config.get("seq_len"):
        parts.append(f"seq {config['seq_len']}")
    if config.get("accum"):
        parts.append(f"accum {config['accum']}")
    if config.get("baseline"):
        parts.append("+ baseline")
    return " · ".join(parts)


def summary_text(view: RunView, now: float) -> Text:
    label = run_label({"id": view.run_id, "name": view.name})
    text = Text.assemble((label, "bold"), "  ",
                         (status_text(view.status), STATUS_STYLES.get(view.status, "")),
                         "  ", config_line(view.config))
    done = view.step or 0
    total = view.steps_total
    pass_note = " (baseline pass)" if view.label == "baseline" else ""
    share = f" ({done / total:.0%})" if total else ""
    text.append(f"\nstep {done:,} of {num(total, ',d')}{share}{pass_note}  ")
    text.append(progress_bar(done, total), "green")
    if view.status in ("running", "launching"):
        text.append(f"  ETA {ago(view.eta)}")
    elif view.ended is not None:
        text.append(f"  ended {ago(now - view.ended)} ago")
    text.append(f"  last loss {num(view.last_loss, '.4f')}")
    if view.held_out_step is not None:
        text.append(" · held-out ")
        text.append(num(view.held_out_loss, ".4f"), HELD_OUT_STYLE)
        text.append(f" at step {view.held_out_step:,}")
    text.append("\nmedian 6–N ")
    text.append(num(view.median_s, ".3f", " s"), "bold")
    text.append(f" · {num(view.tok_s, ',.0f')} tok/s · model {num(view.model_s, '.3f', ' s')}")
    # The error against the figure it is taken from, named (a paired estimate is not the
    # median beside it), with its 95 % interval, as show and the note give it.
    if view.measured_name:
        text.append(f" vs {view.measured_name} {num(view.measured_s, '.3f', ' s')}")
    text.append(" · error ")
    text.append(percent(view.error), "bold")
    if view.interval is not None:
        text.append(f" ±{view.interval * 100:.1f} % at 95 %")
    if view.error_terms:
        text.append(f"\nshare of error by term: {view.error_terms}", "dim")
    if view.host_notice:
        text.append(f"\n! {view.host_notice}", "yellow")
    if view.output:
        text.append(f"\noutput {view.output}", "dim")
    if view.resumes:
        text.append(f"\n↻ {view.resumes}", "yellow")
    if view.exit_reason and view.status not in ("running", "launching", "done"):
        text.append(f"\n✗ {view.exit_reason.splitlines()[0][:200]}", "red")
    return text


def phases_renderable(view: RunView) -> Table | Text:
    if not view.phases:
        return Text("phases: –", style="dim")
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                  title=f"step {num(view.step, ',d')} phases", title_justify="left")
    table.add_column("phase", no_wrap=True)
    table.add_column("s", justify="right", no_wrap=True)
    table.add_column("%", justify="right", no_wrap=True)
    table.add_column("model", justify="right", no_wrap=True)
    for name, seconds, share, model in view.phases:
        table.add_row(name, f"{seconds:.3f}", f"{share:.0%}", num(model, ".3f"))
    return table


def events_text(view: RunView) -> Text:
    if not view.events:
        return Text("events: –", style="dim")
    text = Text("events", style="bold")
    for t, kind, message in view.events:
        stamp = time.strftime("%H:%M:%S", time.localtime(t))
        text.append(f"\n{stamp} ")
        text.append(kind, "cyan")
        text.append(f" {message.splitlines()[0] if message else ''}")
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class CurrentRunPanel(Vertical, can_focus=True):
    """The active run, else the newest finished one (or the one given by --run)."""

    def compose(self) -> ComposeResult:
        yield Static(id="run-summary")
        yield RunPlots(id="run-plots")
        with Horizontal(id="run-lower"):
            yield Static(id="run-phases")
            yield Static(id="run-events")

    def show(self, view: RunView | None, now: float) -> None:
        summary = self.query_one("#run-summary", Static)
        if view is None:
            update_if_changed(summary, Text("no run yet: `rngdctl submit` queues one",
                                            style="dim"))
            update_if_changed(self.query_one("#run-phases", Static), "")
            update_if_changed(self.query_one("#run-events", Static), "")
            self.query_one(RunPlots).display = False
            return
        self.query_one(RunPlots).display = True
        update_if_changed(summary, summary_text(view, now))
        self.query_one(RunPlots).show(view)
        update_if_changed(self.query_one("#run-phases", Static),
                          lambda: phases_renderable(view),
                          key=(view.step, view.phases))
        update_if_changed(self.query_one("#run-events", Static), events_text(view))
