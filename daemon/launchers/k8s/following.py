"""Following a running run: one look at its Job and pod, and the new log lines ingested."""

from __future__ import annotations

from daemon.k8s import cluster, jobspec
from daemon.k8s.client import K8sRejected
from daemon.k8s.logs import LogCursor
from daemon.launchers.base import Outcome
from daemon.store import CANCELLED, DONE, FAILED


class FollowMixin:
    """Part of ``K8sLauncher``: ``follow``'s look at the cluster."""

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
