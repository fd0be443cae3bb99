"""The run's image on the node: listed, pulled by our card-less pre-pull pod, or failing,
kept in the store (daemon/launchers/k8s/state.py) so a restarted daemon knows it too."""

from __future__ import annotations

import logging

from daemon.launchers import retry
from daemon.launchers.k8s import cluster, jobspec
from daemon.launchers.k8s.client import K8sConflict, K8sError, K8sRejected, K8sUnavailable
from daemon.store import FAILED

log = logging.getLogger("rngdctl.k8s")


class ImagesMixin:
    """Part of ``K8sLauncher``: the image gate and the pre-pull pods."""

    def _take_over_prepulls(self, node: str | None) -> None:
        """``node`` None (agents): our pre-pull pods on every node."""
        pods = self.client.list_pods(self.ns, jobspec.selector(
            self.home_id, {jobspec.STAGE_LABEL: jobspec.PREPULL}))
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
        name = jobspec.prepull_name(image, node, home=self.home_id)
        run_id = run.get("id")
        # Read the pod only once we know it exists: a new pre-pull is one create call.
        pod = self.client.read_pod(self.ns, name) if "prepull" in facts else None
        if pod is None:
            body = jobspec.prepull_pod(self.k8s, name=name, node=node, image=image,
                                       run_id=run_id, home=self.home_id)
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
