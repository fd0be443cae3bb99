"""The view model: the frozen plain data a refresh hands the app (``Snapshot`` and its parts),
and the step model's prediction (``Predicted``) that the parts' model figures come from.

No Textual and no store in it: the widgets only copy these numbers into the screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.scheduling import replicas as replicas_mod
from rngdctl.tui.notices import Notice
from rngdctl.tui.series import Series


@dataclass(frozen=True)
class DaemonView:
    """``state``: alive; down (killed or hung: no heartbeat for three ticks, or its pid is
    gone); stopped; or never (no daemon ran here). See daemon/scheduling/liveness.py."""

    state: str
    pid: int | None = None
    launcher: str | None = None
    node: str | None = None
    home: str | None = None
    heartbeat_age: float | None = None
    since: float | None = None  # alive: started; down: last heartbeat; stopped: when
    stop_reason: str | None = None
    pid_gone: bool = False


@dataclass(frozen=True)
class GateRow:
    name: str
    reading: str
    threshold: str
    verdict: str
    detail: str


@dataclass(frozen=True)
class GatesView:
    run_id: int | None = None
    run_label: str | None = None
    checked_at: float | None = None
    passed: bool | None = None
    rows: tuple[GateRow, ...] = ()
    blocked_for: float | None = None
    blocked_by: str | None = None
    load_now: float | None = None
    load_series: tuple[float, ...] = ()
    as_of: float | None = None  # no daemon runs: the stored verdicts are as of this time
    #: With node agents: the node the run would go to (the closest, when every node
    #: blocks) and each node's verdict, one line each.
    node: str | None = None
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueRow:
    position: int
    run_id: int
    name: str | None
    held: bool
    cards: int | None
    resident: int | None
    steps: int | None
    model: str | None
    baseline: bool
    created: float  # epoch seconds: the panel shows its age
    #: Estimated start and end (epoch seconds; None: no estimate) and what they rest on,
    #: or why there is none (daemon/scheduling/estimate.py).
    start: float | None = None
    end: float | None = None
    basis: str = ""


@dataclass(frozen=True)
class Predicted:
    """The step model's prediction for a run's main pass."""

    step_s: float
    phases: dict  # phase -> predicted seconds


@dataclass(frozen=True)
class RunView:
    run_id: int
    name: str | None
    status: str
    config: dict
    label: str  # the pass shown: main, or baseline while the baseline runs
    step: int | None
    steps_total: int | None
    eta: float | None
    median_s: float | None
    tok_s: float | None
    model_s: float | None
    error: float | None
    last_loss: float | None
    #: The newest step's phases: (name, seconds, share of step_s, model's seconds or None).
    phases: tuple[tuple[str, float, float, float | None], ...]
    loss: Series
    step_time: Series
    events: tuple[tuple[float, str, str], ...]
    started: float | None
    ended: float | None
    exit_reason: str | None
    log_path: str | None
    #: The step model's error by term ("fwd_bwd -3.1 %, ...") and, when the compute
    #: term moved outside its 95 % interval, the sentence saying the host changed.
    error_terms: str | None = None
    interval: float | None = None  # the error's 95 % interval, half-width (``Comparison``)
    host_notice: str | None = None
    #: The run's output (daemon/run/output.py): its model folder in words, how often it
    #: resumed and what that cost; the held-out losses (eval records) and the newest.
    output: str | None = None
    resumes: str | None = None
    held_out: Series = field(default_factory=Series)
    held_out_loss: float | None = None
    held_out_step: int | None = None
    #: The step the error is against and which figure it is (as in ``HistoryRow``).
    measured_s: float | None = None
    measured_name: str | None = None


@dataclass(frozen=True)
class HistoryRow:
    run_id: int
    name: str | None
    status: str
    steps_done: int
    steps_total: int | None
    median_s: float | None
    tok_s: float | None
    model_s: float | None
    error: float | None
    ended: float | None
    model: str | None
    #: The step the error is against (``Comparison.measured_s``) and which figure it is:
    #: "paired estimate" or "median" (``Comparison.measured_name``).
    measured_s: float | None = None
    measured_name: str | None = None


@dataclass(frozen=True)
class HolderRow:
    pid: int | None  # None: a phantom pod (cards allocated, no process holds a file)
    user: str
    cmdline: str
    files: tuple[str, ...]
    age: float | None
    cards: tuple[str, ...] = ()
    pod: str | None = None
    job: str | None = None
    run: int | None = None
    mark: str = ""  # "orphan" | "phantom" | ""
    why: str | None = None  # the orphan's reason


@dataclass(frozen=True)
class CardRow:
    """One card's newest reading and its last minutes (oldest first), for the cards panel."""

    node: str | None
    card: str
    age: float
    alive: bool | None
    temp_c: float | None
    power_w: float | None
    power_limit_w: float | None
    util: float | None
    memory_used: int | None
    memory_total: int | None
    throttle: tuple[str, ...] = ()
    temps: tuple[float, ...] = ()
    powers: tuple[float, ...] = ()
    utils: tuple[float, ...] = ()
    run: int | None = None
    holder: str | None = None  # a process not of our runs: "pid 4121 (kim)"


@dataclass(frozen=True)
class EventRow:
    """A daemon-level event (no run): start, stop, tick failure, API outage, ..."""

    time: float
    kind: str
    message: str


@dataclass(frozen=True)
class Snapshot:
    now: float
    home: str
    daemon: DaemonView
    gates: GatesView
    queue: tuple[QueueRow, ...]
    current: RunView | None
    history: tuple[HistoryRow, ...]
    holders: tuple[HolderRow, ...]
    holders_time: float | None = None
    #: Each card's newest reading within the last minutes (rngdctl/tui/data/cards.py).
    cards: tuple[CardRow, ...] = ()
    daemon_events: tuple[EventRow, ...] = ()
    #: What to ring the bell for: the `notify` events stored since the last refresh.
    notices: tuple[Notice, ...] = ()
    #: Under leader election: which replica leads, and the standbys (daemon/scheduling/replicas.py).
    replicas: replicas_mod.Replicas = field(default_factory=replicas_mod.Replicas)
