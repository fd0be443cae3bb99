"""What the scheduler needs from a launcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from daemon.gates.rules import ClusterReading

#: An Outcome status besides the store's finished states: put the run back at
#: the head of the queue (a rescued image pull, a foreign device holder).
REQUEUE = "requeue"


@dataclass(frozen=True)
class Outcome:
    """How a run ended: a store status (done, failed, oom, timeout, cancelled) or REQUEUE."""

    status: str
    reason: str | None = None
    exit_code: int | None = None
    #: A REQUEUE after a transient failure: the ``retry`` event's message and data, which
    #: the scheduler stores (daemon/launchers/retry.py, ``Verdict.event``).
    retry: dict | None = None
    #: When the run ended, where the launcher saw it end before the tick that records it
    #: (a log read to its end over several ticks); None: the recording tick's time.
    ended: float | None = None


class Launcher(Protocol):
    """Constructed as ``Launcher(home=Home, store=Store, config=Config, ingest=Ingest)``."""

    name: str
    #: None: one run at a time in all (nothing is gated while one is active). N: up to
    #: N runs per node, nodes in parallel; ``cluster_reading`` then names the node.
    runs_per_node: int | None

    def cluster_reading(self, run: dict) -> ClusterReading:
        """Cards free and image presence for the gates (None fields: not applicable)."""

    def own_pids(self) -> set[int]:
        """Host pids of our own trainer, which the device-idle gate must not count."""

    def node_pods(self) -> tuple[str | None, list[dict] | None, str | None]:
        """(node, the pods bound to it, why there are none) for the holder report.

        At most one API call. Pods None: no Kubernetes, or the API did not answer.
        """

    def launch(self, run: dict) -> None:
        """Start the run (status is already ``launching``); set it ``running``.

        Raises LaunchError when it cannot start.
        """

    def follow(self, run: dict) -> Outcome | None:
        """Ingest what the run wrote since the last call; its Outcome once it ended."""

    # Optional: ``look(runs)``, a context manager around one tick, in which the launcher
    # may read every active run's state at once for the tick's ``follow`` calls and gate
    # check (the k8s launcher: list calls whatever the number of runs). The daemon calls
    # it when the launcher has it.

    def cancel(self, run: dict) -> None:
        """Begin stopping the run; ``follow`` reports the ``cancelled`` outcome."""

    def abandon(self, run: dict) -> None:
        """Stop the run's trainer now and for good: the daemon gave up following it."""

    def recover(self, run: dict) -> Outcome | None:
        """At daemon start, for a run the store says is active: adopt it (None) or end it."""

    def startup(self) -> None:
        """At daemon start, before any tick (report unknown Jobs, etc.)."""

    def close(self) -> None:
        """The daemon stops; a running trainer is left running, to be adopted later."""
