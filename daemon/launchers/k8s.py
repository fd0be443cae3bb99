"""The Kubernetes launcher: one card Job at a time, gated on the node, followed to its end.

Per tick (see docs/design.md, "Kubernetes launcher"):

- idle: ``cluster_reading`` reads the node and the pods bound to it (2 calls):
  cards free and the image hint. An image that is not on the node is pulled
  by a card-less pre-pull pod first, so the card Job never waits on a pull.
- running: ``follow`` reads the Job, its pod and the new part of the pod log
  (3 calls), ingests the lines, and ends the run from the pod's state.
- An image-pull error deletes the Job in the same tick (the cards come back
  at once) and marks the image missing; when ``daemon/retry.py`` takes the
  failure as transient (the image was pulled before) the run is requeued and
  the next gate check pre-pulls it, else it fails now, saying why. A pre-pull
  pod that cannot pull (a pull error, a failed pod, or no pull within
  ``prepull_timeout``) is deleted and, by the same rule, tried again after
  ``prepull_retry``. Each Job launched and each failed pre-pull is one try of
  the run; after ``max_attempts`` tries the run fails with the first kubelet
  message, even while it is still queued.

The Job's name, the log cursor (``log_since``, ``log_offset``), node and
image digest live in the run's row, so a restarted daemon adopts the Job and
resumes the log where it stopped. Everything else the launcher knows between
ticks (an image missing, a pre-pull in progress, a compile's digest, ...)
lives in the store too, through ``daemon.k8s.state``: a daemon restarted at
any instant acts on what the old one knew.
"""

from __future__ import annotations

import logging
import time

from daemon import cgroups, faults, nodes, retry
from daemon.errors import ConfigError, LaunchError
from daemon.gates import ClusterReading
from daemon.home import Config, Home
from daemon.ingest import Ingest
from daemon.k8s import cluster, jobspec
from daemon.k8s.client import K8sClient, K8sConflict, K8sError, K8sRejected, K8sUnavailable
from daemon.k8s.logs import LogCursor
from daemon.k8s.state import LauncherState
from daemon.launchers.base import REQUEUE, Outcome
from daemon.probes import read_host
from daemon.runspec import trainer_argv
from daemon.store import CANCELLED, DONE, FAILED, OOM, TIMEOUT, Store
from trainer import records

log = logging.getLogger("rngdctl.k8s")

#: Lines of the log's tail kept in a failed run's reason.
TAIL_LINES = 20


class K8sLauncher:
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
        # Every fact carried from tick to tick is in the store (see daemon/k8s/state.py).
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
            jobs = self.client.list_jobs(self.ns, {jobspec.MANAGED_BY: jobspec.MANAGER})
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

    def _take_over_prepulls(self, node: str | None) -> None:
        """``node`` None (agents): our pre-pull pods on every node."""
        pods = self.client.list_pods(self.ns, {jobspec.MANAGED_BY: jobspec.MANAGER,
                                               jobspec.STAGE_LABEL: jobspec.PREPULL})
        for pod in pods:
            spec = pod.get("spec") or {}
            image = (spec.get("containers") or [{}])[0].get("image")
            name = (pod.get("metadata") or {}).get("name")
            view = cluster.pod_view(pod)
            node_name = spec.get("nodeName")
            ours = bool(image) and bool(node_name) and node in (None, node_name)
            if ours and not view.finished and view.waiting not in cluster.PULL_ERRORS:
                if "prepull" not in self.state.image(node_name, image):  # created, then we died
                    self.state.update_image(node_name, image,
                                            prepull={"pod": name, "since": self.clock()})
                continue
            self.client.delete_pod(self.ns, name, grace_seconds=0)
            if ours and view.started:
                self._got_image(node_name, image, view)
            elif ours:
                self.state.update_image(node_name, image, prepull=None)

    def _drop_prepulls(self, node: str, keep: str) -> None:
        """Delete pre-pull pods of images the head of the queue no longer needs."""
        for image, facts in self.state.images(node).items():
            if image != keep and "prepull" in facts:
                self.client.delete_pod(self.ns, facts["prepull"]["pod"], grace_seconds=0)
                self.state.update_image(node, image, prepull=None)

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
        self.state.update_run(run["id"], before=sorted(h.pid for h in self._host().holders),
                              checked=None, end=None, waiting=None, decided=None)
        precompile = bool(run["config"].get("precompile") or self.k8s.precompile)
        stage = jobspec.COMPILE if precompile and not self._compiled_already(run, node) \
            else jobspec.TRAIN
        try:
            name = self._create_job(run, node, stage)
        except (K8sError, ConfigError) as exc:
            raise LaunchError(f"cannot create Job {self.ns}/{jobspec.job_name(run, stage)}: "
                              f"{exc}") from None
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

    # === following ===========================================================

    def _follow(self, run: dict, name: str) -> Outcome | None:
        run_id = run["id"]
        # 1. The Job. Gone: cancelled by us, or removed by someone else.
        job = self.client.read_job(self.ns, name)
        if job is None:
            if run.get("cancel_requested"):
                return Outcome(CANCELLED, "cancelled")
            return Outcome(FAILED, f"Job {self.ns}/{name} disappeared before it finished"
                                   + self._tail_suffix(run_id))
        stage = ((job.get("metadata") or {}).get("labels") or {}).get(jobspec.STAGE_LABEL,
                                                                        jobspec.TRAIN)
        # 2. Its pod.
        pods = self.client.list_pods(self.ns, {jobspec.JOB_LABEL: name})
        pod = cluster.newest(pods)
        view = cluster.pod_view(pod, jobspec.CONTAINER) if pod else None

        # 3. A cancel the scheduler asked for: make sure the Job is gone.
        if run.get("cancel_requested"):
            if view is not None and view.started:
                self._read_log(run, view.name, stage, final=view.finished)
            self._delete(name, [p["metadata"]["name"] for p in pods])
            return Outcome(CANCELLED, "cancelled")

        # 4. An image that cannot be pulled: free the cards in this tick.
        if view is not None and view.waiting in cluster.PULL_ERRORS:
            return self._pull_failed(run, name, view)
        if view is not None and view.waiting in cluster.CONFIG_ERRORS:
            return self._end_attempt(run, name, [view.name], Outcome(
                FAILED, f"{view.waiting}: {view.waiting_message or ''}".strip()))

        # 5. The container ran: its node and image digest, the new log lines.
        if view is not None and view.started:
            self._note_pod(run, view)
            self._read_log(run, view.name, stage, final=view.finished)

        # 6. Ended? The pod's state first, then the Job's conditions.
        outcome = self._ended(run, job, view, stage)
        if outcome is not None:
            if stage == jobspec.COMPILE and outcome.status == DONE:
                if view is not None and view.image_id:
                    self.state.update_run(run_id, compiled={
                        "job": name, "image": self._image(run), "digest": view.image_id})
                return self._compiled(run, name)
            if stage == jobspec.COMPILE:
                return Outcome(outcome.status, f"compile Job {name}: {outcome.reason}",
                               outcome.exit_code)
            return outcome

        # 7. Running: is anyone else on our cards?
        if view is not None and view.running and stage == jobspec.TRAIN:
            return self._check_holders(run, name, view)
        return None

    def _ended(self, run: dict, job: dict, view: cluster.PodView | None,
               stage: str) -> Outcome | None:
        run_id = run["id"]
        condition = cluster.job_condition(job)
        deadline = (condition is not None and condition[1] == "DeadlineExceeded") or (
            view is not None and view.reason == "DeadlineExceeded")
        if deadline:
            seconds = (job.get("spec") or {}).get("activeDeadlineSeconds")
            return Outcome(TIMEOUT, f"DeadlineExceeded: the Job ran past its {seconds} s "
                                    f"deadline" + self._tail_suffix(run_id, stage))
        if view is not None and cluster.admission_rejected(view):
            return self._rejected(run, job, view)
        put_out = view is not None and (view.reason in cluster.EVICTION_REASONS
                                        or view.disrupted or view.phase == "Unknown")
        if put_out and (view.phase in ("Failed", "Unknown") or view.deleting):
            return self._evicted(run, job, view)
        if view is not None and view.terminated == "OOMKilled":
            return Outcome(OOM, "OOMKilled: the container ran out of memory"
                                + self._tail_suffix(run_id, stage), view.exit_code)
        if view is not None and view.finished:
            code = view.exit_code
            if code == 0 or (code is None and view.phase == "Succeeded"):
                return Outcome(DONE, None, 0)
            if code == records.EXIT_OOM:
                return Outcome(OOM, "the trainer ran out of memory" + self._end_suffix(run_id),
                               code)
            return Outcome(FAILED, f"exit code {code} ({view.terminated or view.phase})"
                                   + self._end_suffix(run_id)
                                   + self._tail_suffix(run_id, stage), code)
        if condition is not None:
            kind, reason, message = condition
            if kind == "Complete":
                return Outcome(DONE, None, 0)
            return Outcome(FAILED, f"Job failed: {reason or ''} {message or ''}".strip()
                                   + self._tail_suffix(run_id, stage))
        return None

    def _evicted(self, run: dict, job: dict, view: cluster.PodView) -> Outcome:
        why = view.reason or view.disrupted or ("node lost" if view.phase == "Unknown" else "")
        reason = f"pod {view.name} was put out ({why}): {view.message or ''}".strip()
        verdict = retry.decide(retry.EVICTION if self.k8s.requeue_on_eviction else None,
                               tries=self._tries(run), limit=self._limit(),
                               evidence="the pod was put out; [k8s] requeue_on_eviction")
        outcome = self._end_attempt(run, job["metadata"]["name"], [view.name], Outcome(
            REQUEUE, reason, retry=verdict.event(reason)) if verdict.retry else Outcome(
            FAILED, reason))
        if verdict.retry:
            self.store.add_event(run["id"], "evicted", reason, now=self.clock())
        return outcome

    def _rejected(self, run: dict, job: dict, view: cluster.PodView) -> Outcome:
        """The node refused the pod at admission (``OutOf<resource>``): requeue, N tries.

        Whatever ``requeue_on_eviction`` says: the pod never ran, someone else won the
        race for the resource between our gate check and the kubelet's admission.
        """
        reason = f"pod {view.name} was rejected by the node ({view.reason}): " \
                 f"{view.message or 'not enough ' + view.reason[len('OutOf'):]}"
        tries = self._tries(run)
        verdict = retry.decide(retry.CARD_RACE, tries=tries, limit=self._limit(),
                               evidence=f"the node had no {view.reason[len('OutOf'):]} left "
                                        "at admission")
        outcome = Outcome(REQUEUE, reason, retry=verdict.event(reason)) if verdict.retry \
            else Outcome(FAILED, f"the node rejected the pod on {tries} "
                                 f"tr{'y' if tries == 1 else 'ies'}; last: {reason}")
        self._end_attempt(run, job["metadata"]["name"], [view.name], outcome)
        self.store.add_event(run["id"], "admission_rejected",
                             f"{reason} (try {tries} of {self._limit()})",
                             now=self.clock(), data={"reason": view.reason,
                                                     "message": view.message})
        return outcome

    def _pull_failed(self, run: dict, name: str, view: cluster.PodView) -> Outcome:
        """Delete the Job at once, keep the first message, requeue (or fail after N tries)."""
        message = f"{view.waiting}: {view.waiting_message or 'the image cannot be pulled'}"
        image = self._image(run)
        # Stored, so that a restarted daemon does not trust a stale status.images.
        self.state.update_image(view.node or run.get("node") or self.node(), image,
                                missing=True, pulled=None, digest=None)
        tries = self._tries(run)
        verdict = self._pull_verdict(run, view.node or run.get("node") or self.node(), image,
                                     view.waiting, tries)
        if verdict.retry:
            requeue = (f"image {image} not pulled ({view.waiting}); a pre-pull pod without a "
                       f"card fetches it before the retry")
            outcome = Outcome(REQUEUE, requeue, retry=verdict.event(message))
        else:
            outcome = Outcome(FAILED, self._pull_failed_reason(run["id"], image, verdict,
                                                               message))
        self._end_attempt(run, name, [view.name], outcome)
        self.store.add_event(run["id"], "image_pull",
                             f"{message} (try {tries} of {self._limit()}); "
                             f"deleted Job {name} to free its cards", now=self.clock(),
                             data={"image": image, "message": message, "job": name})
        return outcome

    def _limit(self) -> int:
        return retry.max_attempts(self.config)

    def _pull_verdict(self, run: dict, node: str, image: str, kubelet: str | None,
                      tries: int, *, timed_out: bool = False) -> retry.Verdict:
        """Retry a failed pull? Only of an image pulled before (daemon/retry.py)."""
        if timed_out:
            transient, evidence = True, "the pull ran out of time; nothing refused the image"
        else:
            listed = False
            if kubelet not in retry.NEVER_PULLABLE:
                node_obj = self.client.read_node(node)  # 1 call, only after a failed pull
                listed = node_obj is not None and cluster.image_listed(node_obj, image)
            transient, evidence = retry.image_pull_transient(
                self.store, image, kubelet, listed=listed, default_image=self.k8s.image)
        return retry.decide(retry.IMAGE_PULL, tries=tries, limit=self._limit(),
                            transient=transient, evidence=evidence)

    def _pull_failed_reason(self, run_id: int, image: str, verdict: retry.Verdict,
                            message: str) -> str:
        if verdict.how == retry.EXHAUSTED:
            return self._pull_gave_up(run_id, image, verdict.tries, message)
        return verdict.failed_reason(f"image {image} could not be pulled: {message}")

    def _tries(self, run: dict) -> int:
        """Tries of a run so far: each Job launched, and each pre-pull pod that failed."""
        failed = self.store.events(run_id=run["id"], kinds=["prepull_failed"])
        return int(run.get("attempts") or 0) + len(failed)

    def _pull_gave_up(self, run_id: int, image: str, tries: int, message: str) -> str:
        """The failed run's reason: the first kubelet message of its pulls (later ones degrade)."""
        pulls = self.store.events(run_id=run_id, kinds=["image_pull", "prepull_failed"])
        first = next(((e.get("data") or {}).get("message") for e in pulls
                      if (e.get("data") or {}).get("message")), None) or message
        return (f"image {image} could not be pulled after {tries} "
                f"tr{'y' if tries == 1 else 'ies'}: {first}")

    def _compiled(self, run: dict, compile_name: str) -> Outcome | None:
        """The compile Job succeeded: start the card Job once its cards are still free.

        The compile may take minutes, in which someone else can take the cards: a card
        Job created then would sit Pending, holding the run, until its deadline.
        """
        node = run.get("node") or self.node()
        need = int(run["config"]["cards"])
        _, free, detail = self._cards_on(node)
        if free < need:
            message = (f"compile Job {compile_name} succeeded; waiting for {need} cards "
                       f"({detail})")
            if self.state.run(run["id"]).get("waiting") != free:
                self.state.update_run(run["id"], waiting=free)
                self.store.add_event(run["id"], "compile", message, now=self.clock())
            return None
        self.state.update_run(run["id"], waiting=None)
        self.store.add_event(run["id"], "compile", f"compile Job {compile_name} succeeded; "
                             f"starting the card Job", now=self.clock())
        name = self._create_job(run, node, jobspec.TRAIN)
        self.store.update_run(run["id"], job_name=name, log_since=None, log_offset=0)
        return None

    def _note_pod(self, run: dict, view: cluster.PodView) -> None:
        changes = {}
        if view.node and view.node != run.get("node"):
            changes["node"] = view.node
        if view.image_id and view.image_id != run.get("image_digest"):
            changes["image_digest"] = view.image_id
        if changes:
            self.store.update_run(run["id"], **changes)
            run.update(changes)
        if view.node and view.image_id:  # the image is on the node as this digest
            self.state.update_image(view.node, self._image(run), digest=view.image_id)

    def _compiled_already(self, run: dict, node: str) -> bool:
        """A compile Job of this run succeeded for the digest the image has on the node now.

        A retry (after a failed pull, an eviction, a lost card race) then skips the
        compile. The digest on the node is what a pod of ours last ran: the pre-pull
        after a failed pull, else the compile or card pod. Unknown means compile again.
        """
        compiled = self.state.run(run["id"]).get("compiled")
        image = self._image(run)
        if not compiled or compiled.get("image") != image:
            return False
        digest = self.state.image(node, image).get("digest")
        if digest is None or digest != compiled.get("digest"):
            return False
        self.store.add_event(run["id"], "compile", f"compile skipped: Job {compiled['job']} "
                             f"compiled {image} as {digest}, the digest on {node} now",
                             now=self.clock(), data=compiled)
        return True

    def _read_log(self, run: dict, pod_name: str, stage: str, *, final: bool = False) -> None:
        """New log lines since the cursor: fed to ingest, appended to the run's saved log."""
        run_id = run["id"]
        cursor = LogCursor(run.get("log_since"), int(run.get("log_offset") or 0))
        try:
            body = self.client.pod_log(self.ns, pod_name, since_time=cursor.since_time,
                                       container=jobspec.CONTAINER)
        except K8sRejected as exc:
            if exc.status == 400:  # the container is not up yet, or already gone
                return
            raise
        lines = cursor.take(body or "", final=final)
        if not lines:
            return
        log_file = self.home.run_dir(run_id) / ("compile.log" if stage == jobspec.COMPILE
                                                else "trainer.log")
        with open(log_file, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        fed = self.ingest.feed(run_id, lines)
        if fed.end is not None:
            self.state.update_run(run_id, end={"status": fed.end.status, "error": fed.end.error})
        if fed.new_steps:
            self.state.update_run(run_id, checked=True)  # the trainer holds its cards and steps
        self.store.update_run(run_id, log_since=cursor.last, log_offset=cursor.taken_at_last)
        run.update(log_since=cursor.last, log_offset=cursor.taken_at_last)

    # === device holders ======================================================

    def _host(self):
        return read_host(tuple(self.config.gates.device_globs), proc=self.proc)

    def _check_holders(self, run: dict, name: str, view: cluster.PodView) -> Outcome | None:
        """Until the first step: a device holder that is not our pod's deletes the Job."""
        facts = self.state.run(run["id"])
        if facts.get("checked"):
            return None
        ours, foreign = self._split_holders(self._host().holders, view.uid,
                                            set(facts.get("before") or []))
        self.state.set_own_pids(run["id"], {h.pid for h in ours})
        if not foreign:
            return None
        first = foreign[0]
        reason = (f"pid {first.pid} ({first.user}: {first.cmdline[:80]}) holds "
                  f"{', '.join(first.files[:3])}, and it is not our pod {view.name}")
        why = f"a foreign process held the cards: {reason}"
        verdict = retry.decide(retry.FOREIGN_HOLDER, tries=self._tries(run), limit=self._limit(),
                               evidence="a process not ours held the cards at start")
        outcome = self._end_attempt(run, name, [view.name], Outcome(
            REQUEUE, why, retry=verdict.event(why)) if verdict.retry else Outcome(FAILED, why))
        self.store.add_event(run["id"], "foreign_holder", reason + f"; deleted Job {name}",
                             now=self.clock())
        return outcome

    def _split_holders(self, holders, pod_uid: str | None, before: set[int]):
        """(ours, foreign): ours when the cgroup names our pod's uid.

        When a holder's cgroup cannot be read (or the pod uid is unknown), a
        holder seen before the launch counts as foreign, any other as ours.
        """
        ours, foreign = [], []
        for holder in holders:
            uid = cgroups.read_pod_uid(holder.pid, self.proc)
            if uid != cgroups.UNREADABLE and pod_uid:
                (ours if uid == pod_uid.lower() else foreign).append(holder)
            else:
                (foreign if holder.pid in before else ours).append(holder)
        return ours, foreign

    def node_pods(self) -> tuple[str | None, list[dict] | None, str | None]:
        """The node and the pods bound to it (1 API call), for the holder report.

        (node, None, why) when the API does not answer or the node is unknown.
        With agents and no ``[k8s] node`` the daemon is on no particular node: no call
        (each node's holders are in its agent's reading).
        """
        if self.k8s.agents and not self._node:
            return None, None, "node agents: each node's holders are in its agent's reading"
        try:
            node = self.node()
            return node, self.client.pods_on_node(node), None
        except K8sUnavailable as exc:
            self._down(None, exc)
            return self._node, None, f"Kubernetes API unavailable: {exc}"
        except (K8sRejected, ConfigError) as exc:
            return self._node, None, f"cannot list the node's pods: {exc}"

    # === images ==============================================================

    def _image_reading(self, run: dict, node: dict, image: str) -> tuple[bool, str]:
        now = self.clock()
        node_name = node["metadata"]["name"]
        if self._daemon:
            try:  # the run it was for was cancelled, moved or failed
                self._drop_prepulls(node_name, keep=image)
            except K8sError as exc:
                log.warning("deleting a pre-pull pod: %s", exc)
        facts = self.state.image(node_name, image)
        # A pre-pull in progress settles the question: until its pod has pulled (or
        # failed), neither an earlier pull nor status.images lets the card Job start.
        if "prepull" not in facts:
            if facts.get("pulled"):
                return True, f"{image} pulled onto the node by our pre-pull pod"
            if not facts.get("missing") and cluster.image_listed(node, image):
                return True, f"{image} is in the node's status.images"
        why = ("a pull failed on the node" if facts.get("missing")
               else "not in the node's status.images (a capped list: a hint)")
        if not self._daemon:
            doing = (f"pre-pulling with pod {facts['prepull']['pod']}" if "prepull" in facts
                     else "the daemon pre-pulls it with a card-less pod")
            return False, f"{image}: {why}; {doing}"
        failed = facts.get("failed")
        if failed and "prepull" not in facts and now - failed["time"] < self.k8s.prepull_retry:
            wait = self.k8s.prepull_retry - (now - failed["time"])
            return False, (f"{image}: pre-pull failed: {failed['message']}; "
                           f"next try in {wait:.0f} s")
        try:
            return self._prepull(run, node_name, image, why, facts)
        except K8sUnavailable as exc:
            self._down(None, exc)
            return False, f"{image}: {why}; pre-pull waits for the API"
        except K8sRejected as exc:
            return False, f"{image}: {why}; cannot start a pre-pull pod: {exc}"

    def _prepull(self, run: dict, node: str, image: str, why: str,
                 facts: dict) -> tuple[bool, str]:
        """Start, watch and clean up the pre-pull pod for ``image`` (no card requested)."""
        name = jobspec.prepull_name(image, node)
        run_id = run.get("id")
        # Read the pod only once we know it exists: a new pre-pull is one create call.
        pod = self.client.read_pod(self.ns, name) if "prepull" in facts else None
        if pod is None:
            body = jobspec.prepull_pod(self.k8s, name=name, node=node, image=image, run_id=run_id)
            try:
                self.client.create_pod(self.ns, body)
            except K8sConflict:
                pod = self.client.read_pod(self.ns, name)  # ours, from before a restart
        if pod is None:
            self.state.update_image(node, image, prepull={"pod": name, "since": self.clock()})
            self.store.add_event(run_id, "prepull", f"{image}: {why}; pre-pulling on {node} "
                                 f"with pod {name} (no card)", now=self.clock())
            return False, f"{image}: {why}; pre-pulling with pod {name}"
        prepull = facts.get("prepull") or {"pod": name, "since": self.clock()}
        if "prepull" not in facts:
            self.state.update_image(node, image, prepull=prepull)
        view = cluster.pod_view(pod)
        pulled = view.started or view.waiting in ("RunContainerError", "CreateContainerError",
                                                  "StartError")
        if pulled:  # stored first: a finished pod left by a restart is deleted at startup
            self._got_image(node, image, view)
            self.client.delete_pod(self.ns, name, grace_seconds=0)
            self.store.add_event(run_id, "prepull", f"{image} pulled onto {node} by pod {name}",
                                 now=self.clock(), data={"pulled": image, "node": node})
            return True, f"{image} pulled onto the node by our pre-pull pod"
        failure = self._prepull_failure(view, prepull["since"])
        if failure is not None:
            return self._prepull_failed_now(run, node, name, image, failure,
                                            kubelet=view.waiting or view.reason,
                                            timed_out=failure.startswith("not pulled within"))
        state = view.waiting or view.phase
        detail = f" ({view.waiting_message})" if view.waiting_message else ""
        return False, f"{image}: pre-pulling with pod {name}: {state}{detail}"

    def _got_image(self, node: str, image: str, view: cluster.PodView) -> None:
        """Our pre-pull pod pulled ``image``: it is on the node, as the digest the pod ran."""
        self.state.update_image(node, image, pulled=self.clock(), missing=None, failed=None,
                                prepull=None, digest=view.image_id)

    def _prepull_failure(self, view: cluster.PodView, started: float) -> str | None:
        """Why the pre-pull pod failed (the kubelet's message), or None while it may still pull."""
        if view.waiting in cluster.PULL_ERRORS:
            return f"{view.waiting}: {view.waiting_message or 'the image cannot be pulled'}"
        if view.phase == "Failed":
            return f"{view.reason or 'Failed'}: {view.message or 'the pre-pull pod failed'}"
        if self.clock() - started >= self.k8s.prepull_timeout:
            return (f"not pulled within {self.k8s.prepull_timeout} s "
                    f"({view.waiting or view.phase})")
        return None

    def _prepull_failed_now(self, run: dict, node: str, pod_name: str, image: str,
                            message: str, *, kubelet: str | None = None,
                            timed_out: bool = False) -> tuple[bool, str]:
        """Delete the pre-pull pod and count a try; fail the queued run when not retried."""
        run_id = run.get("id")
        # Stored before the pod goes: a restart in between finds the pod failing and
        # deletes it at startup, without counting the try twice.
        self.store.add_event(run_id, "prepull_failed", f"{image}: {message}", now=self.clock(),
                             data={"image": image, "message": message, "pod": pod_name})
        self.state.update_image(node, image, prepull=None,
                                failed={"time": self.clock(), "message": message})
        self.client.delete_pod(self.ns, pod_name, grace_seconds=0)
        if run_id is None:
            return False, f"{image}: pre-pull failed: {message}"
        tries = self._tries(run)
        verdict = self._pull_verdict(run, node, image, kubelet, tries, timed_out=timed_out)
        if verdict.retry:
            event = verdict.event(message)
            self.store.add_event(run_id, retry.KIND, event["message"], data=event["data"],
                                 now=self.clock())
            return False, (f"{image}: pre-pull failed (try {tries} of {self._limit()}): "
                           f"{message}; next try in {self.k8s.prepull_retry:g} s")
        # The run is the queue's head and still queued: the scheduler will not launch it
        # (the image gate fails, and claim_for_launch only claims a queued run).
        reason = self._pull_failed_reason(run_id, image, verdict, message)
        self.store.finish_run(run_id, FAILED, reason=reason, now=self.clock())
        self.state.forget_run(run_id)
        self.store.add_event(run_id, "finished", f"{FAILED}: {reason}", now=self.clock())
        log.info("run %s %s %s", run_id, FAILED, reason)
        return False, f"{image}: run {run_id} failed: {reason}"

    # === helpers =============================================================

    def _create_job(self, run: dict, node: str, stage: str) -> str:
        name = jobspec.job_name(run, stage)
        image = self._image(run)
        command = "compile" if stage == jobspec.COMPILE else "train"
        argv = trainer_argv(run, log_path=None, python="python", cache_dir=self.k8s.cache_dir,
                            command=command)
        body = jobspec.job(run, self.k8s, name=name, node=node, image=image, argv=argv,
                           stage=stage, resource=self._card_resource(node))
        try:
            self.client.create_job(self.ns, body)
        except K8sConflict:
            existing = self.client.read_job(self.ns, name) or {}
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if labels.get(jobspec.RUN_LABEL) != str(run["id"]):
                raise LaunchError(f"Job {self.ns}/{name} exists and is not this run's") from None
            self.store.add_event(run["id"], "adopt", f"Job {name} already existed: adopted",
                                 now=self.clock(), data=self._job_data(existing, stage))
            return name
        data = self._job_data(body, stage)
        self.store.add_event(run["id"], "launch", f"created {stage} Job {self.ns}/{name} on node "
                             f"{node}: {data['cards']} card(s), image {image}, "
                             f"activeDeadlineSeconds {data['activeDeadlineSeconds']}, "
                             f"ttlSecondsAfterFinished {data['ttlSecondsAfterFinished']}",
                             now=self.clock(), data=data)
        return name

    def _card_resource(self, node_name: str) -> str:
        """``[k8s] card_resource``, else the one the node advertises (1 API call, none
        when the gate check with agents just listed the node)."""
        if self.k8s.card_resource:
            return self.k8s.card_resource
        node = self._listed.get(node_name) or self.client.read_node(node_name) or {}
        return cluster.card_resource(node) or jobspec.RESOURCE

    @staticmethod
    def _job_data(job: dict, stage: str) -> dict:
        """What a Job really has, for the ``launch`` event (the experiment note reads it)."""
        meta, spec = job.get("metadata") or {}, job.get("spec") or {}
        pod = ((spec.get("template") or {}).get("spec")) or {}
        container = (pod.get("containers") or [{}])[0]
        return {
            "job": meta.get("name"),
            "namespace": meta.get("namespace"),
            "stage": stage,
            "node": (pod.get("nodeSelector") or {}).get(jobspec.HOSTNAME_LABEL),
            "image": container.get("image"),
            "cards": cluster.container_cards(container),
            "activeDeadlineSeconds": spec.get("activeDeadlineSeconds"),
            "ttlSecondsAfterFinished": spec.get("ttlSecondsAfterFinished"),
        }

    def _pod_names(self, job_name: str) -> list[str]:
        return [p["metadata"]["name"]
                for p in self.client.list_pods(self.ns, {jobspec.JOB_LABEL: job_name})]

    def _end_attempt(self, run: dict, job_name: str, pod_names: list[str],
                     outcome: Outcome) -> Outcome:
        """Store the attempt's outcome, then delete its Job and pods.

        A daemon stopped after the delete and before the scheduler stored the outcome
        finds the Job gone at restart: ``recover`` returns this outcome (a requeue
        stays a requeue) instead of failing the run.
        """
        self.state.update_run(run["id"], decided={"status": outcome.status,
                                                  "reason": outcome.reason,
                                                  "retry": outcome.retry})
        self._delete(job_name, pod_names)
        return outcome

    def _delete(self, job_name: str, pod_names: list[str]) -> None:
        """Delete the Job and its pods now: the cards come free without waiting for the GC."""
        self.client.delete_job(self.ns, job_name)
        for pod in pod_names:
            self.client.delete_pod(self.ns, pod)

    def _find_job(self, run: dict) -> str | None:
        """The Job this attempt of the run created, found by label (its name was not stored).

        Only this attempt's names count: an earlier attempt's Job that outlived
        its requeue is not the one the daemon was launching.
        """
        ours = {jobspec.job_name(run, stage) for stage in (jobspec.TRAIN, jobspec.COMPILE)}
        jobs = self.client.list_jobs(self.ns, {jobspec.MANAGED_BY: jobspec.MANAGER,
                                               jobspec.RUN_LABEL: str(run["id"])})
        job = cluster.newest([j for j in jobs if (j.get("metadata") or {}).get("name") in ours])
        return job["metadata"]["name"] if job else None

    def _end_suffix(self, run_id: int) -> str:
        end = self.state.run(run_id).get("end") or {}
        return f"; trainer: {end['status']}: {end['error']}" if end.get("error") else ""

    def _tail_suffix(self, run_id: int, stage: str = jobspec.TRAIN) -> str:
        """The last non-record lines of the saved log, for a failed run's reason."""
        path = self.home.run_dir(run_id) / ("compile.log" if stage == jobspec.COMPILE
                                            else "trainer.log")
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - 65536))
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        tail = [line for line in text.splitlines()
                if isinstance(records.parse_line(line), records.LogLine)][-TAIL_LINES:]
        return ("\n--- log tail ---\n" + "\n".join(tail)) if tail else ""

    # === node agents =========================================================

    def node_states(self) -> list[nodes.NodeState]:
        """Every node with cards, its agent's reading and cards free: 3 list calls."""
        states = nodes.node_states(self.client.list_nodes(), self.client.list_live_pods(),
                                   self.client.list_configmaps(self.ns, nodes.AGENT_LABELS))
        self._listed = {state.name: state.node for state in states}
        return states

    def node_verdicts(self, run: dict) -> list[tuple[nodes.NodeState, list]]:
        """Each node's gates for ``run`` (agent, load, holders, cards, our runs there)."""
        now = self.clock()
        active = self.store.active_runs()
        return [(state, nodes.node_gates(state, cards=int(run["config"]["cards"]),
                                         load_max=self.config.gates.load_max, active=active,
                                         now=now, per_node=self.runs_per_node or 1))
                for state in self.node_states()]

    def _agents_reading(self, run: dict) -> ClusterReading:
        """Gate every node from its agent; the launch node's reading stands in for /proc.

        The launch node is the run's own (``submit --node``), else ``[k8s] node``;
        else, of the nodes where every gate passes (a node already holding
        ``runs_per_node`` of our runs does not), the one with the most cards free
        (ties: the one listing the image); else the closest one, whose blocking
        gates say why nothing starts. The reading names that node: the scheduler
        claims the run for it, and ``launch`` sends the Job there.
        """
        self._run_id = run.get("id")
        image = self._image(run)
        try:
            verdicts = self.node_verdicts(run)
        except K8sUnavailable as exc:
            self._down(None, exc)
            return ClusterReading(0, f"Kubernetes API unavailable: {exc}", False,
                                  "unknown: the API does not answer")
        except K8sRejected as exc:
            return ClusterReading(0, f"cannot read the nodes: {exc}", False, "unknown")
        self._up(None)
        pinned = self._pinned(run)
        chosen = nodes.choose(verdicts, pinned=pinned, image=image)
        if chosen is None:
            where = pinned or "any node"
            return ClusterReading(0, f"no node with {jobspec.RESOURCE} ({where})", False,
                                  "unknown")
        state, gates = chosen
        present, image_detail = self._image_reading(run, state.node, image)
        agent = state.agent
        ours = {r["id"] for r in self.store.active_runs()}
        return ClusterReading(
            state.cards_free, state.cards_detail, present, image_detail,
            host=nodes.agent_host(agent, ours) if agent else None,
            holders=nodes.foreign_holders(agent, ours) if agent else (),
            extra=(gates[0], nodes.summary_gate(verdicts, state)),
            node=state.name, per_node=self.runs_per_node or 1)
