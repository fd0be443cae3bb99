"""The k8s launcher's class: the Launcher protocol (startup, gates, launch, cancel,
recover, follow) and its plumbing; the rest is in the sibling modules (see
``__init__``)."""

from __future__ import annotations

import logging
import time

from daemon import faults
from daemon.errors import ConfigError, LaunchError
from daemon.gates.rules import ClusterReading
from daemon.home import Config, Home
from daemon.launchers.base import REQUEUE, Outcome
from daemon.launchers.k8s import cluster, jobspec
from daemon.launchers.k8s.agent_readings import AgentsMixin
from daemon.launchers.k8s.client import K8sClient, K8sError, K8sRejected, K8sUnavailable
from daemon.launchers.k8s.following import FollowMixin
from daemon.launchers.k8s.foreign_holders import HoldersMixin
from daemon.launchers.k8s.images import ImagesMixin
from daemon.launchers.k8s.jobs import JobsMixin
from daemon.launchers.k8s.outcomes import OutcomesMixin
from daemon.launchers.k8s.state import LauncherState
from daemon.run.ingest import Ingest
from daemon.store import CANCELLED, FAILED, Store

log = logging.getLogger("rngdctl.k8s")


class K8sLauncher(FollowMixin, OutcomesMixin, JobsMixin, ImagesMixin, HoldersMixin,
                  AgentsMixin):
    name = "k8s"

    def __init__(self, *, home: Home, store: Store, config: Config, ingest: Ingest,
                 client: K8sClient | None = None, proc: str = "/proc",
                 clock=time.time):
        self.home = home
        self.store = store
        self.config = config
        self.k8s = config.k8s
        self.ingest = ingest
        self.proc = proc
        self.clock = clock
        self._client = client
        if client is not None and client.on_event is None:
            client.on_event = self._api_event
        # Every fact carried from tick to tick is in the store (see daemon/launchers/k8s/state.py).
        # What stays in memory is not such a fact: the node (the config, or one read
        # of the API), whether this process is the daemon, and which run the API
        # calls in progress are for (for the client's retry events).
        self.state = LauncherState(store, clock)
        self._node: str | None = self.k8s.node
        self._daemon = False  # startup() ran: we may create pre-pull pods
        self._run_id: int | None = None  # the run the current API calls are for
        # The nodes as the agents' gate check last listed them: a launch right after
        # it reads the node's card resource here instead of one more API call.
        self._listed: dict[str, dict] = {}
        # ... and their agents' readings: a launch there notes the holders before it.
        self._readings: dict[str, object] = {}
        # One tick's look at the followed runs (following.py): each run's Seen, taken once,
        # and the lists the tick's gate check shares ("live_pods", "agents").
        self._seen: dict = {}
        self._shared: dict[str, list] = {}
        # A run whose log read needs more than following.LOG_READ_BYTES for one second of
        # its log: its limit (None: no limit). Advice only, rebuilt after a restart.
        self._log_limits: dict[int, int | None] = {}

    # === plumbing ============================================================

    @property
    def client(self) -> K8sClient:
        if self._client is None:
            self._client, conn = K8sClient.from_config(self.k8s, on_event=self._api_event)
            log.info("Kubernetes API at %s (%s, context %s)", conn.server, conn.source,
                     conn.context)
        return self._client

    @property
    def ns(self) -> str:
        return self.k8s.namespace

    @property
    def home_id(self) -> str:
        """This home's id: every Job, pod and Lease of ours carries it (jobspec.ours)."""
        return self.store.home_id

    def _api_event(self, kind: str, message: str) -> None:
        self.store.add_event(self._run_id, kind, message, now=self.clock())

    def _down(self, run_id: int | None, exc: K8sUnavailable) -> None:
        """Store one event per streak of API unavailability, not one per tick."""
        if not self.state.api_down(run_id):
            self.state.set_api_down(run_id, True)
            self.store.add_event(run_id, "k8s_unavailable", f"{exc}; retrying next tick",
                                 now=self.clock())
        log.warning("%s", exc)

    def _up(self, run_id: int | None) -> None:
        if self.state.api_down(run_id):
            self.state.set_api_down(run_id, False)
            self.store.add_event(run_id, "k8s_available", "the Kubernetes API answers again",
                                 now=self.clock())

    def node(self) -> str:
        """The node our runs go to: ``[k8s] node``, else the one node with RNGD cards."""
        if self._node:
            return self._node
        with_cards = [n["metadata"]["name"] for n in self.client.list_nodes()
                      if (cluster.allocatable_cards(n, self.k8s.card_resource) or 0) > 0]
        if len(with_cards) != 1:
            found = ", ".join(with_cards) or "none"
            raise ConfigError(f"set [k8s] node in config.toml: nodes with RNGD cards "
                              f"({self.k8s.card_resource or ', '.join(jobspec.CARD_RESOURCES)}):"
                              f" {found}")
        self._node = with_cards[0]
        return self._node

    def _image(self, run: dict) -> str:
        return (run.get("config") or {}).get("image") or self.k8s.image

    @property
    def runs_per_node(self) -> int | None:
        """With node agents, up to ``[k8s] runs_per_node`` runs per node, nodes in parallel;
        without, one run at a time on the one node (None), as before agents."""
        return max(1, self.k8s.runs_per_node) if self.k8s.agents else None

    def _pinned(self, run: dict) -> str | None:
        """The node a run must go to: its own (``submit --node``), else ``[k8s] node``."""
        return (run.get("config") or {}).get("node") or self.k8s.node

    def _launch_node(self, run: dict) -> str:
        """Where ``launch`` sends the run: with agents, the node its claim stored."""
        if self.k8s.agents and run.get("node"):
            return run["node"]
        return (run.get("config") or {}).get("node") or self.node()

    # === the Launcher protocol ===============================================

    def startup(self) -> None:
        """Resolve the node, enforce K >= 2 ticks, report Jobs of ours the store does not know.

        Pre-pull pods a previous daemon left are taken over: a finished one is
        deleted (one that pulled marks its image pulled), one still pulling is
        watched by the next gate check.
        """
        self._daemon = True
        if self.config.gates.consecutive < 2:
            self.config.gates.consecutive = 2
            self.store.add_event(None, "k8s", "gates.consecutive raised to 2 for the k8s "
                                 "launcher: gates must pass on 2 ticks in a row (race safety)",
                                 now=self.clock())
        try:
            node = None if self.k8s.agents else self.node()  # agents: every node is ours
            jobs = self.client.list_jobs(self.ns, jobspec.selector(self.home_id))
        except K8sUnavailable as exc:
            self._down(None, exc)
            return
        except K8sRejected as exc:
            self.store.add_event(None, "k8s_error", f"at startup: {exc}", now=self.clock())
            return
        known = {r["job_name"] for r in self.store.active_runs() if r.get("job_name")}
        active = {str(r["id"]) for r in self.store.active_runs()}
        for job in jobs:
            meta = job.get("metadata") or {}
            run_id = (meta.get("labels") or {}).get(jobspec.RUN_LABEL)
            if meta.get("name") in known or run_id in active:
                continue
            if cluster.job_condition(job) is not None:
                continue  # a finished Job waiting for its TTL
            self.store.add_event(None, "unknown_job",
                                 f"Job {self.ns}/{meta.get('name')} (run {run_id}) is ours but "
                                 f"not active in this store; left alone", now=self.clock())
        try:
            self._take_over_prepulls(node)
        except K8sError as exc:  # not needed to run: the next gate check re-creates them
            self.store.add_event(None, "k8s_error", f"at startup, taking over pre-pull pods: "
                                 f"{exc}", now=self.clock())
        log.info("k8s launcher: namespace %s, node %s", self.ns, node or "any (agents)")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def own_pids(self) -> set[int]:
        return self.state.own_pids()

    def cluster_reading(self, run: dict) -> ClusterReading:
        """Cards free on the node and whether the run's image is there (2 API calls).

        With ``[k8s] agents``: every node at once (3 list calls), see ``_agents_reading``.
        """
        if self.k8s.agents:
            return self._agents_reading(run)
        self._run_id = run.get("id")
        image = self._image(run)
        try:
            node, free, detail = self._cards_on(self._launch_node(run))
        except K8sUnavailable as exc:
            self._down(None, exc)
            return ClusterReading(0, f"Kubernetes API unavailable: {exc}", False,
                                  "unknown: the API does not answer")
        except (K8sRejected, ConfigError) as exc:
            return ClusterReading(0, f"cannot read the node: {exc}", False, "unknown")
        self._up(None)
        if node is None:
            return ClusterReading(0, detail, False, "unknown")
        present, image_detail = self._image_reading(run, node, image)
        return ClusterReading(free, detail, present, image_detail)

    def _cards_on(self, node_name: str) -> tuple[dict | None, int, str]:
        """The node, its cards free and why (2 API calls: the node, the pods on it)."""
        node = self.client.read_node(node_name)
        if node is None:
            return None, 0, f"node {node_name} does not exist"
        free, detail = cluster.cards_free(node, self.client.pods_on_node(node_name),
                                          self.k8s.card_resource)
        return node, free, detail

    def launch(self, run: dict) -> None:
        """Create the run's Job (or its compile Job first); the run becomes ``running``."""
        self._run_id = run["id"]
        try:
            node = self._launch_node(run)
        except (K8sError, ConfigError) as exc:
            raise LaunchError(str(exc)) from None
        # A new attempt: what the last one saw of holders and its trainer's end is void.
        self.state.update_run(run["id"], before=self._holder_pids(node),
                              checked=None, end=None, waiting=None, decided=None)
        precompile = bool(run["config"].get("precompile") or self.k8s.precompile)
        stage = jobspec.COMPILE if precompile and not self._compiled_already(run, node) \
            else jobspec.TRAIN
        try:
            name = self._create_job(run, node, stage)
        except (K8sError, ConfigError) as exc:
            name = jobspec.job_name(run, stage, home=self.home_id)
            raise LaunchError(f"cannot create Job {self.ns}/{name}: {exc}") from None
        # A daemon killed here left a Job the store does not name: recover() finds it by
        # its run-id label and this attempt's name, and adopts it.
        faults.point("after_spawn")
        self.store.update_run(run["id"], status="running", job_name=name, node=node,
                              log_since=None, log_offset=0)
        faults.point("after_record")

    def cancel(self, run: dict) -> None:
        """Delete the Job (its pod goes with it); ``follow`` then reports ``cancelled``."""
        self._run_id = run["id"]
        if not run.get("job_name"):
            return
        try:
            self._delete(run["job_name"], self._pod_names(run["job_name"]))
            self.store.add_event(run["id"], "cancel", f"deleted Job {run['job_name']}",
                                 now=self.clock())
        except K8sError as exc:
            self.store.add_event(run["id"], "cancel", f"deleting Job {run['job_name']} failed "
                                 f"({exc}); retrying next tick", now=self.clock())

    def abandon(self, run: dict) -> None:
        """The daemon gave up on the run: delete its Job now, as a cancel does."""
        self.cancel(run)
        self.state.forget_run(run["id"])

    def recover(self, run: dict) -> Outcome | None:
        """After a restart: adopt the run's Job if it is still there, else end the run."""
        self._run_id = run["id"]
        name = run.get("job_name")
        try:
            if not name:
                name = self._find_job(run)
                if name is None:
                    return Outcome(REQUEUE, "the daemon stopped before the run's Job was created")
                self.store.update_run(run["id"], job_name=name, status="running")
            job = self.client.read_job(self.ns, name)
        except K8sUnavailable as exc:
            self._down(run["id"], exc)
            return None  # follow() will find out once the API answers
        except K8sRejected as exc:
            return Outcome(FAILED, f"cannot read Job {name}: {exc}")
        if job is None:
            if run.get("cancel_requested"):
                return Outcome(CANCELLED, "cancelled")
            decided = self.state.run(run["id"]).get("decided")
            if decided:  # we deleted it, then stopped before the outcome was stored
                return Outcome(decided["status"], decided["reason"],
                               retry=decided.get("retry"))
            return Outcome(FAILED, f"Job {self.ns}/{name} was gone when the daemon restarted "
                                   f"(its log up to then is in trainer.log)")
        self.store.add_event(run["id"], "adopt", f"adopted Job {self.ns}/{name} after a restart",
                             now=self.clock())
        return None

    def follow(self, run: dict) -> Outcome | None:
        """One look at the run's Job: ingest new log lines; its Outcome once it ended."""
        self._run_id = run_id = run["id"]
        name = run.get("job_name")
        if not name:
            return Outcome(CANCELLED if run.get("cancel_requested") else FAILED,
                           "no Job was created for this run")
        try:
            outcome = self._follow(run, name)
        except K8sUnavailable as exc:
            self._down(run_id, exc)
            return None
        except K8sRejected as exc:
            self.store.add_event(run_id, "k8s_error", str(exc), now=self.clock())
            return Outcome(FAILED, f"the Kubernetes API refused a request: {exc}")
        except (LaunchError, ConfigError) as exc:  # the card Job after a compile Job
            outcome = Outcome(FAILED, str(exc))
        else:
            self._up(run_id)
        if outcome is not None and outcome.status != REQUEUE:
            self.state.forget_run(run_id)
        return outcome
