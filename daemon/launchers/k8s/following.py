"""Following the running runs: one look a tick at all their Jobs and pods, then per run the
new log lines ingested and the run's end read from its pod and Job.

A tick's look (``look``) costs list calls whatever the number of runs followed
(docs/design.md, "Following many runs"):

- the pods: with node agents, our pods among the live pods of every namespace,
  the list the gate check of the same tick reads anyway (so no call of its
  own); else our namespace's pods (1 call);
- our pods of every phase (1 call), with agents, only in a tick where some
  followed run's pod is not among the live ones (it ended, or is not made);
- the Jobs (1 call), only in a tick where some followed run has no pod, or
  its pod is being deleted or was ended by the Job's deadline: otherwise the
  pod's own state says what happens next;
- the log (1 call per pod whose container has started), from the stored cursor.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from daemon.launchers.base import Outcome
from daemon.launchers.k8s import cluster, jobspec
from daemon.launchers.k8s.client import K8sRejected
from daemon.launchers.k8s.logs import LogCursor
from daemon.store import CANCELLED, DONE, FAILED
from trainer.ownership import open_regular

#: Our Jobs and pods (pre-pull pods too: they carry no run's Job label, and are left out),
#: every home's: one made before homes had an id carries none, and is matched by the name
#: this home stored (``jobspec.another_homes``).
OURS = {jobspec.MANAGED_BY: jobspec.MANAGER}
#: What one tick reads of a pod's log at most (``limitBytes``): a trainer that writes
#: faster is read on in the next ticks, so that every tick ends and acts on cancels and
#: deadlines. A read resumes at its last line's whole second (logs.py): a second of log
#: past the limit doubles the run's limit, up to the largest, then is read whole.
LOG_READ_BYTES = 2 << 20
LOG_READ_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Seen:
    """What a look saw of one followed run: its Job (None: gone) and its pods."""

    job: dict | None
    pods: list[dict] = field(default_factory=list)
    #: False: its pod simply runs, and the Job was not listed (nothing of it is needed).
    job_listed: bool = True


def _by_job(pods: list[dict], namespace: str, home: str) -> dict[str, list[dict]]:
    """Our pods in ``namespace`` by the Job they belong to (our Job label); another home's
    are left out, whatever their Job's name."""
    out: dict[str, list[dict]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace", namespace) != namespace \
                or labels.get(jobspec.MANAGED_BY) != jobspec.MANAGER \
                or jobspec.another_homes(pod, home):
            continue
        job = labels.get(jobspec.JOB_LABEL)
        if job:
            out.setdefault(job, []).append(pod)
    return out


def _stage(obj: dict | None) -> str:
    return (((obj or {}).get("metadata") or {}).get("labels") or {}).get(jobspec.STAGE_LABEL,
                                                                          jobspec.TRAIN)


class FollowMixin:
    """Part of ``K8sLauncher``: ``follow``'s look at the cluster."""

    # === one look a tick for every followed run ==============================

    @contextlib.contextmanager
    def look(self, runs: list[dict]):
        """Around one tick of the daemon: the Jobs and pods of every followed run in list
        calls, which the tick's ``follow`` calls (each takes its run's part once) and its
        gate check (the live pods, the agents' readings) then read instead of calling."""
        self._seen, self._shared = {}, {}
        followed = [r for r in runs if r.get("job_name")]
        if followed:
            try:
                self._seen = self._take_look(followed)
            except Exception as exc:  # noqa: BLE001 (raised again by each run's follow)
                # Each run's follow meets it, as its own calls would have: an API error as
                # before, anything else counted by the daemon's follow_failures for each run
                # (so no run waits on a failing look for ever).
                self._seen = {r["job_name"]: exc for r in followed}
        try:
            yield
        finally:
            self._seen, self._shared = {}, {}

    def _take_look(self, runs: list[dict]) -> dict[str, Seen]:
        if self.k8s.agents:
            live = self.client.list_live_pods()
            self._shared["live_pods"] = live  # the gate check's list this tick
            by_job, complete = _by_job(live, self.ns, self.home_id), False
        else:
            by_job = _by_job(self.client.list_pods(self.ns, OURS), self.ns, self.home_id)
            complete = True
        seen: dict[str, Seen] = {}
        rest = []
        for run in runs:
            pods = by_job.get(run["job_name"], [])
            if pods and not self._needs_job(pods):
                seen[run["job_name"]] = Seen(None, pods, job_listed=False)
            else:
                rest.append(run["job_name"])
        if rest and not complete:  # the live list leaves out the pods that ended
            by_job = _by_job(self.client.list_pods(self.ns, OURS), self.ns, self.home_id)
        need = [name for name in rest if self._needs_job(by_job.get(name, []))]
        jobs = {(j.get("metadata") or {}).get("name"): j
                for j in self.client.list_jobs(self.ns, OURS)
                if not jobspec.another_homes(j, self.home_id)} if need else {}
        for name in rest:
            if name in need:
                job = jobs.get(name)
                seen[name] = Seen(job, by_job.get(name, []) if job is not None else [])
            else:
                seen[name] = Seen(None, by_job.get(name, []), job_listed=False)
        running = [r for r in runs if self._running(seen.get(r["job_name"]))]
        if self.k8s.agents and any(not self.state.run(r["id"]).get("checked") for r in running):
            # A run before its first step gets the foreign-holder check, from its node's
            # agent: one list for them all, which the gate check then reads too.
            self._shared["agents"] = self._list_agents()
        return seen

    @staticmethod
    def _running(seen: Seen | None) -> bool:
        """Its pod's container runs (the foreign-holder check may look at it)."""
        if seen is None or not seen.pods:
            return False
        return cluster.pod_view(cluster.newest(seen.pods), jobspec.CONTAINER).running

    @staticmethod
    def _needs_job(pods: list[dict]) -> bool:
        """Whether the run's Job must be read too: only when there is no pod (gone with its
        Job, or not made yet), the pod is being deleted, or the Job's deadline ended it.
        Otherwise the pod's own state says what happens next: it is pending or runs, or it
        ended with its exit code, OOM, eviction or rejection, or its image cannot be used.

        The Job controller deletes a Job's pods when it fails the Job (its deadline), and
        a deleted Job's pods go with it, so a Job that ends while its pod is pending or
        runs shows on the pod (being deleted) by the next tick.
        """
        if not pods:
            return True
        view = cluster.pod_view(cluster.newest(pods), jobspec.CONTAINER)
        return view.deleting or view.reason == "DeadlineExceeded"

    def _seen_of(self, name: str) -> Seen:
        """This tick's look at the run's Job and pods; outside a look, 2 calls of its own."""
        seen = self._seen.pop(name, None)
        if isinstance(seen, Exception):
            raise seen
        if seen is not None:
            return seen
        job = self.client.read_job(self.ns, name)
        if job is None:
            return Seen(None)
        return Seen(job, self.client.list_pods(self.ns, {jobspec.JOB_LABEL: name}))

    # === following ===========================================================

    def _follow(self, run: dict, name: str) -> Outcome | None:
        run_id = run["id"]
        # 1. The Job. Gone: cancelled by us, or removed by someone else.
        seen = self._seen_of(name)
        job, pods = seen.job, seen.pods
        if job is None and seen.job_listed:
            if run.get("cancel_requested"):
                return Outcome(CANCELLED, "cancelled")
            return Outcome(FAILED, f"Job {self.ns}/{name} disappeared before it finished"
                                   + self._tail_suffix(run_id))
        # 2. Its pod (the stage is on both, as the Job's template gave it to the pod).
        pod = cluster.newest(pods)
        stage = _stage(job if job is not None else pod)
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

        # 5. The container ran: its node and image digest, the new log lines. An ended
        # container's log is read to its end, over several ticks if need be, before its end.
        if view is not None and view.started:
            self._note_pod(run, view)
            if not self._read_log(run, view.name, stage, final=view.finished) \
                    and view.finished:
                return None

        # 6. Ended? The pod's state first, then the Job's conditions (a pod that simply
        # runs cannot have ended, and one that ended says how: the Job was not listed).
        outcome = self._ended(run, name, job, view, stage)
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

    def _read_log(self, run: dict, pod_name: str, stage: str, *, final: bool = False) -> bool:
        """New log lines since the cursor, at most the run's read limit of them: fed to
        ingest, appended to the run's saved log. Whether the read reached the log's end."""
        run_id = run["id"]
        cursor = LogCursor(run.get("log_since"), int(run.get("log_offset") or 0))
        limit = self._log_limits.get(run_id, LOG_READ_BYTES)
        try:
            body = self.client.pod_log(self.ns, pod_name, since_time=cursor.since_time,
                                       container=jobspec.CONTAINER, limit_bytes=limit)
        except K8sRejected as exc:
            if exc.status == 400:  # the container is not up yet, or already gone
                return True
            raise
        cut = limit is not None and len((body or "").encode("utf-8", "replace")) >= limit
        lines = cursor.take(body or "", final=final and not cut)
        if cut and not lines:
            # The read began at the cursor's whole second and its lines filled the limit:
            # the next read takes twice as much, and at last the rest at once.
            grown = 2 * limit
            self._log_limits[run_id] = grown if grown <= LOG_READ_MAX_BYTES else None
        elif not cut:
            self._log_limits.pop(run_id, None)
        if not lines:
            return not cut
        log_file = self.home.run_dir(run_id) / ("compile.log" if stage == jobspec.COMPILE
                                                else "trainer.log")
        fd = open_regular(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, what="log")
        with os.fdopen(fd, "a", encoding="utf-8") as fh:  # never through a planted link
            fh.write("".join(line + "\n" for line in lines))
        fed = self.ingest.feed(run_id, lines)
        if fed.end is not None:
            self.state.update_run(run_id, end={"status": fed.end.status, "error": fed.end.error,
                                               "checkpoint": fed.end.data.get("checkpoint")})
        if fed.new_steps:
            self.state.update_run(run_id, checked=True)  # the trainer holds its cards and steps
        self.store.update_run(run_id, log_since=cursor.last, log_offset=cursor.taken_at_last)
        run.update(log_since=cursor.last, log_offset=cursor.taken_at_last)
        return not cut
