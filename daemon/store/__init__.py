"""The store: one SQLite file per home, and every query rngdctl makes.

This package owns the schema and all SQL: no module outside it writes any
(tests/spine/test_import_rules.py). The daemon is the one writer of run state;
the CLI writes only new runs and requests (cancel, hold, move); the TUI only
reads. WAL mode lets them all open the file at once.

One module per idea, each a part of ``Store``:

- ``schema``: the tables as ``MIGRATIONS`` and ``SCHEMA_VERSION`` (a schema change
  is one new entry);
- ``connection``: opening and migrating the file, transactions, rows as dicts;
- ``codec``: values into and out of rows (JSON columns, non-finite losses);
- ``runs``: the run states, queue order, the launch claim, cancel, hold, move;
- ``queue``: --after and priority, restart, retry evidence, estimates (issue 14);
- ``steps``: passes and steps: ingest, decoded reads, the TUI's light reads,
  export's stream;
- ``aggregates``: a pass's numbers from SQL order statistics, sealed rows;
- ``markers``: a running pass's order statistics kept at ingest (issue 12);
- ``events``: the event log;
- ``evals``: the held-out loss (eval records), and the steps a resume trains again;
- ``host``: load samples, gate checks, idle card pods, their compaction;
- ``cards``: each card's furiosa-smi readings, by run, and their compaction (issue 27);
- ``daemons``: the launchers' facts between ticks, the heartbeat, the replicas;
- ``trackers``: what each tracker (TensorBoard, MLflow) was sent, and the reads it sends.
"""

from __future__ import annotations

from daemon.store.aggregates import Aggregates
from daemon.store.cards import Cards
from daemon.store.codec import _finite_or_none as _finite_or_none
from daemon.store.codec import _json as _json
from daemon.store.codec import _loss_flag as _loss_flag
from daemon.store.daemons import Daemons
from daemon.store.evals import Evals
from daemon.store.events import Events
from daemon.store.host import Host
from daemon.store.markers import Markers
from daemon.store.queue import Queue
from daemon.store.runs import (
    ACTIVE,
    CANCELLED,
    DONE,
    FAILED,
    FINISHED,
    LAUNCHING,
    OOM,
    QUEUED,
    RUNNING,
    STATUSES,
    TIMEOUT,
    Runs,
)
from daemon.store.schema import (
    MIGRATIONS,
    PHASE_COLUMNS,
    SCHEMA_VERSION,
    STEADY_FIRST,
    STEADY_INDEXES,
)
from daemon.store.steps import Steps
from daemon.store.trackers import Trackers


class Store(Runs, Queue, Steps, Aggregates, Markers, Events, Evals, Host, Cards, Daemons,
            Trackers):
    """An open rngdctl.db. Cheap to open; open one per process."""


__all__ = [
    "ACTIVE",
    "CANCELLED",
    "DONE",
    "FAILED",
    "FINISHED",
    "LAUNCHING",
    "MIGRATIONS",
    "OOM",
    "PHASE_COLUMNS",
    "QUEUED",
    "RUNNING",
    "SCHEMA_VERSION",
    "STATUSES",
    "STEADY_FIRST",
    "STEADY_INDEXES",
    "TIMEOUT",
    "Store",
]
