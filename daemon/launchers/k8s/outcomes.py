"""How an attempt ended: the pod's and the Job's state as an Outcome, and the retry
verdicts (daemon/launchers/retry.py) for the failures that may be transient."""

from __future__ import annotations

import logging
import os

from daemon.launchers import retry
from daemon.launchers.base import REQUEUE, Outcome
from daemon.launchers.k8s import cluster, jobspec
from daemon.store import DONE, FAILED, OOM, TIMEOUT
from trainer import records
from trainer.ownership import NotOurs, open_regular

log = logging.getLogger("rngdctl.k8s")

#: Lines of the log's tail kept in a failed run's reason.
TAIL_LINES = 20


class OutcomesMixin:
    """Part of ``K8sLauncher``: the failure classification."""

    def _ended(self, run: dict, name: str, job: dict | None, view: cluster.PodView | None,
               stage: str) -> Outcome | None:
        """The attempt's outcome from its pod, then its Job (None: the Job was not listed,
        as the pod's own state settles it; see following.py ``_needs_job``)."""
        run_id = run["id"]
        condition = cluster.job_condition(job) if job is not None else None
        deadline = (condition is not None and condition[1] == "DeadlineExceeded") or (
            view is not None and view.reason == "DeadlineExceeded")
        if deadline:
            seconds = ((job or {}).get("spec") or {}).get("activeDeadlineSeconds")
            return Outcome(TIMEOUT, f"DeadlineExceeded: the Job ran past its {seconds} s "
                                    f"deadline" + self._tail_suffix(run_id, stage))
        if view is not None and cluster.admission_rejected(view):
            return self._rejected(run, name, view)
        put_out = view is not None and (view.reason in cluster.EVICTION_REASONS
                                        or view.disrupted or view.phase == "Unknown")
        if put_out and (view.phase in ("Failed", "Unknown") or view.deleting):
            return self._evicted(run, name, view)
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
            end = self.state.run(run_id).get("end") or {}
            if end.get("status") == "preempted":
                return self._preempted(run, end, code)
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

    def _evicted(self, run: dict, name: str, view: cluster.PodView) -> Outcome:
        why = view.reason or view.disrupted or ("node lost" if view.phase == "Unknown" else "")
        reason = f"pod {view.name} was put out ({why}): {view.message or ''}".strip()
        verdict = retry.decide(retry.EVICTION if self.k8s.requeue_on_eviction else None,
                               tries=self._tries(run), limit=self._limit(),
                               evidence="the pod was put out; [k8s] requeue_on_eviction")
        outcome = self._end_attempt(run, name, [view.name], Outcome(
            REQUEUE, reason, retry=verdict.event(reason)) if verdict.retry else Outcome(
            FAILED, reason))
        if verdict.retry:
            self.store.add_event(run["id"], "evicted", reason, now=self.clock())
        return outcome

    def _preempted(self, run: dict, end: dict, code: int | None) -> Outcome:
        """A SIGTERM that was not ours (the pod showed no eviction) stopped the trainer after
        a checkpoint: the next try goes on from it (daemon/launchers/retry.py ``preempted``)."""
        reason = "stopped by a SIGTERM that rngdctl did not send" + (
            f"; checkpoint {end['checkpoint']} kept" if end.get("checkpoint") else "")
        verdict = retry.decide(retry.PREEMPTED if end.get("checkpoint") else None,
                               tries=self._tries(run), limit=self._limit(),
                               evidence="the trainer wrote a checkpoint to go on from")
        if verdict.retry:
            return Outcome(REQUEUE, reason, code, retry=verdict.event(reason))
        return Outcome(FAILED, verdict.failed_reason(reason), code)

    def _rejected(self, run: dict, name: str, view: cluster.PodView) -> Outcome:
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
        self._end_attempt(run, name, [view.name], outcome)
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
        """Retry a failed pull? Only of an image pulled before (daemon/launchers/retry.py)."""
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

    def _end_suffix(self, run_id: int) -> str:
        end = self.state.run(run_id).get("end") or {}
        return f"; trainer: {end['status']}: {end['error']}" if end.get("error") else ""

    def _tail_suffix(self, run_id: int, stage: str = jobspec.TRAIN) -> str:
        """The last non-record lines of the saved log, for a failed run's reason."""
        path = self.home.run_dir(run_id) / ("compile.log" if stage == jobspec.COMPILE
                                            else "trainer.log")
        try:
            with os.fdopen(open_regular(path, what="log"), "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - 65536))
                text = fh.read().decode("utf-8", errors="replace")
        except (OSError, NotOurs):
            return ""
        tail = [line for line in text.splitlines()
                if isinstance(records.parse_line(line), records.LogLine)][-TAIL_LINES:]
        return ("\n--- log tail ---\n" + "\n".join(tail)) if tail else ""
