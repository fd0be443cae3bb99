"""The Job's life: created (or adopted after a restart), found by label, deleted, and the
card Job started once a compile Job succeeded. The manifest itself is ``jobspec.py``."""

from __future__ import annotations

from daemon.errors import LaunchError
from daemon.launchers.base import Outcome
from daemon.launchers.k8s import cluster, jobspec
from daemon.launchers.k8s.client import K8sConflict
from daemon.run.spec import trainer_argv


class JobsMixin:
    """Part of ``K8sLauncher``: its Jobs."""

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

    def _create_job(self, run: dict, node: str, stage: str) -> str:
        name = jobspec.job_name(run, stage, home=self.home_id)
        image = self._image(run)
        command = "compile" if stage == jobspec.COMPILE else "train"
        argv = trainer_argv(run, log_path=None, python="python", cache_dir=self.k8s.cache_dir,
                            command=command, out_dir=jobspec.output_dir(run, self.k8s),
                            on_checkpoint_error=self.config.daemon.checkpoint_failure,
                            home_id=self.store.home_id,
                            output_mode=self.config.daemon.output_mode)
        body = jobspec.job(run, self.k8s, name=name, node=node, image=image, argv=argv,
                           home=self.home_id, stage=stage, resource=self._card_resource(node),
                           grace_s=self.config.daemon.stop_grace_s)
        try:
            self.client.create_job(self.ns, body)
        except K8sConflict:
            existing = self.client.read_job(self.ns, name) or {}
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if not jobspec.ours(existing, self.home_id) \
                    or labels.get(jobspec.RUN_LABEL) != str(run["id"]):
                raise LaunchError(f"Job {self.ns}/{name} exists and is not this run's "
                                  f"(of this home, {self.home_id})") from None
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
            "node": jobspec.pinned_node(pod),
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
        ours = {jobspec.job_name(run, stage, home=self.home_id)
                for stage in (jobspec.TRAIN, jobspec.COMPILE)}
        jobs = self.client.list_jobs(self.ns, jobspec.selector(
            self.home_id, {jobspec.RUN_LABEL: str(run["id"])}))
        job = cluster.newest([j for j in jobs if (j.get("metadata") or {}).get("name") in ours])
        return job["metadata"]["name"] if job else None
