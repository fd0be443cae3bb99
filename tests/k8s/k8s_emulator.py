"""kmock's Kubernetes emulator on a background event loop, with what rngdctl's tests need.

The official client is synchronous; kmock's server is asyncio. Running the
server's loop in its own thread lets tests (and bench/k8s_calls_per_tick.py)
call the launcher directly. What kmock 0.8 lacks, this subclass adds: pod
logs that honour ``sinceTime`` and ``timestamps``, SelfSubjectAccessReview
answers (not stored objects), and optimistic concurrency: every create and
patch stamps a new ``metadata.resourceVersion``, and a PUT (replace) whose
``resourceVersion`` is not the stored one is refused with 409 Conflict, as the
API server does (the Lease of leader election relies on it). There is no
controller: the test plays the Job controller and the kubelet with
``start_pod`` and ``set_pod``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import threading
import uuid
from pathlib import Path

import aiohttp.web
import attrs
import kmock
from kmock._internal import apps

from daemon.launchers.k8s import jobspec

NS = "ml"
AGENTS = "rngdctl-agents"  # [k8s] agent_namespace's default: the agents' ConfigMaps
NODE = "rngd-node-1"
RESOURCES = ("v1/nodes", "v1/pods", "batch/v1/jobs", "v1/namespaces", "v1/configmaps",
             "coordination.k8s.io/v1/leases")
LEASES = "coordination.k8s.io/v1/leases"
NO_NEWLINE = "\0no-newline"
#: The media types the apiserver serves (Accept must name one, or a wildcard).
SERIALIZERS = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf",
               "application/*", "*/*")


def stamp(second: float, nanos: int = 0) -> str:
    moment = dt.datetime.fromtimestamp(int(second), tz=dt.UTC)
    frac = f".{nanos:09d}".rstrip("0") if nanos else ""
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    logs: dict = attrs.field(factory=dict)  # (namespace, pod) -> [(stamp, text)]
    denied: set = attrs.field(factory=set)  # {(verb, resource)} SelfSubjectAccessReview says no
    #: {(verb, resource): names}: granted on these objects only (RBAC resourceNames)
    named: dict = attrs.field(factory=dict)
    log_requests: list = attrs.field(factory=list)
    #: When set, plays the Job controller and kubelet: a created Job gets a pod, on the
    #: Job's node, that has already succeeded with these log lines (for end-to-end runs of
    #: the daemon). A callable gets the Job and returns its lines.
    autopilot: list | None = None
    #: With autopilot: its pods stay Running (their log already there) until ``release``.
    autopilot_hold: bool = False
    #: The cluster's resourceVersion counter (one sequence for every object, as etcd's).
    version: int = 0

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # PUT on a named object is a replace; kmock has no fallback for it. User
        # reactions (faults) still come first; a faulted PUT writes nothing.
        self.fallback[kmock.method.PUT] << self._serve_replace

    def next_version(self) -> str:
        self.version += 1
        return str(self.version)

    async def _serve_replace(self, request):
        if request.resource is None or request.name is None or not isinstance(request.data, dict):
            raise kmock.KubernetesError(status=405, reason="MethodNotAllowed",
                                        message="PUT needs a named object and a JSON body")
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key not in self.objects or self.objects[key].deleted:
                raise kmock.KubernetesObjectNotFoundError()
            stored = self.objects[key].raw.get("metadata", {}).get("resourceVersion")
            sent = (request.data.get("metadata") or {}).get("resourceVersion")
            if sent is not None and sent != stored:
                raise kmock.KubernetesError(
                    status=409, reason="Conflict",
                    message=f"Operation cannot be fulfilled on {request.resource.plural} "
                            f"\"{request.name}\": the object has been modified; please apply "
                            f"your changes to the latest version and try again")
            body = json.loads(json.dumps(request.data))
            body.setdefault("metadata", {})["resourceVersion"] = self.next_version()
            self.objects[key].create(body)  # a new version of the object, whole
            raw = self.objects[key].raw
            await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
        return raw  # kmock renders a dict as the JSON answer

    async def _handle(self, request):
        if request.action in (kmock.action.CREATE, kmock.action.UPDATE) \
                and isinstance(request.data, dict):
            # Each write is a new resourceVersion (a patch's own one is not a precondition here).
            metadata = request.data.setdefault("metadata", {})
            if isinstance(metadata, dict):
                metadata["resourceVersion"] = self.next_version()
        if request.resource is not None and request.resource.plural == "selfsubjectaccessreviews":
            attrs_ = (request.data or {}).get("spec", {}).get("resourceAttributes", {})
            resource = attrs_.get("resource", "")
            if attrs_.get("subresource"):
                resource += "/" + attrs_["subresource"]
            allowed = (attrs_.get("verb"), resource) not in self.denied
            names = self.named.get((attrs_.get("verb"), resource))
            if names is not None and attrs_.get("name") not in names:
                allowed = False
            return aiohttp.web.json_response({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "status": {"allowed": allowed, "reason": "" if allowed else "RBAC: denied"}})
        if request.subresource == "log" and request.method.value == "GET":
            return await self._serve_log(request)
        response = await super()._handle(request)
        if self.autopilot is not None and request.action == kmock.action.CREATE \
                and request.resource.plural == "jobs":
            self._succeed(request.data)
        return response

    def _succeed(self, job: dict) -> None:
        meta, template = job["metadata"], job["spec"]["template"]
        name = meta["name"] + "-auto"
        node = jobspec.pinned_node(template["spec"]) or NODE
        lines = self.autopilot(job) if callable(self.autopilot) else self.autopilot
        self.objects["v1/pods", meta["namespace"], name] = {
            "metadata": {"name": name, "namespace": meta["namespace"], "uid": str(uuid.uuid4()),
                         "labels": template["metadata"]["labels"]},
            "spec": {**template["spec"], "nodeName": node},
            "status": self._auto_status(running=self.autopilot_hold),
        }
        self.logs[meta["namespace"], name] = [
            (stamp(1_767_225_600 + i), line) for i, line in enumerate(lines)]

    @staticmethod
    def _auto_status(*, running: bool) -> dict:
        state = ({"running": {"startedAt": "2026-01-01T00:00:01Z"}} if running
                 else {"terminated": {"exitCode": 0, "reason": "Completed"}})
        return {"phase": "Running" if running else "Succeeded", "containerStatuses": [{
            "name": "trainer", "imageID": "registry.example/x@sha256:" + "cd" * 32,
            "state": state}]}

    async def release(self) -> int:
        """Autopilot pods held Running succeed now, and later ones at once; how many."""
        self.autopilot_hold = False
        done = 0
        for (res, _, name), obj in list(self.objects.items()):
            if res.plural == "pods" and name.endswith("-auto") and not obj.deleted \
                    and obj.raw["status"]["phase"] == "Running":
                obj.patch({"status": self._auto_status(running=False)})
                done += 1
        return done

    async def _serve_log(self, request):
        # User reactions (faults) still come first.
        for payload in self._payloads:
            if math.inf * -1 in payload.priorities:
                continue  # kmock's own fallbacks: the log is served below
            if request in payload._source and not payload._disabled.is_set():
                return await apps.RawHandler._handle(self, request)
        self.log_requests.append(dict(request.params))
        accept = request.headers.get("Accept") or "*/*"
        if not any(kind.split(";")[0].strip() in SERIALIZERS for kind in accept.split(",")):
            # The apiserver's negotiation, logs included (a bare text/plain is refused).
            raise kmock.KubernetesError(
                status=406, reason="NotAcceptable",
                message="only the following media types are accepted: application/json, "
                        "application/yaml, application/vnd.kubernetes.protobuf")
        lines = self.logs.get((request.namespace, request.name))
        if lines is None:
            raise kmock.KubernetesObjectNotFoundError()
        since = request.params.get("sinceTime")
        floor = dt.datetime.fromisoformat(since).timestamp() if since else None
        out = []
        for ts, text in lines:
            # A line ending in NO_NEWLINE is served without its newline (a partial last line).
            end = "" if text.endswith(NO_NEWLINE) else "\n"
            text = text.removesuffix(NO_NEWLINE)
            second = dt.datetime.fromisoformat(ts.split(".")[0].rstrip("Z") + "Z").timestamp()
            if floor is not None and second < floor:
                continue
            out.append(f"{ts} {text}{end}" if request.params.get("timestamps") == "true"
                       else f"{text}{end}")
        body = "".join(out).encode()
        if request.params.get("limitBytes"):  # the kubelet cuts the log there, mid-line too
            body = body[:int(request.params["limitBytes"])]
        return aiohttp.web.Response(body=body, content_type="text/plain")


class Cluster:
    """A running emulator: its URL, a kubeconfig for it, and helpers to play the cluster."""

    def __init__(self, tmp: Path):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.kmock, self.server = self.call(self._start())
        self.url = str(self.server.url).rstrip("/")
        self.kubeconfig = tmp / "kubeconfig"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "emu",
            "clusters": [{"name": "emu", "cluster": {"server": self.url}}],
            "users": [{"name": "me", "user": {"token": "t"}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "me",
                                                     "namespace": NS}}],
        }))

    def call(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self):
        emu = Emulator()
        await emu.__aenter__()
        server = apps.Server(emu)
        await server.__aenter__()
        for resource in RESOURCES:
            emu.resources[resource] = {}
        return emu, server

    async def _stop(self):
        await self.server.__aexit__(None, None, None)
        await self.kmock.__aexit__(None, None, None)

    def close(self) -> None:
        try:
            self.call(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()

    # --- requests the client made ---------------------------------------------

    @property
    def requests(self) -> list:
        return list(self.kmock._requests)

    def fail(self, method: str, path: str, times: int, payload=500) -> None:
        """The next ``times`` requests to ``path`` get ``payload`` (a status, or a coroutine)."""
        view = self.kmock[method, path]
        done = len(list(view))  # a slice counts the requests already made
        view[done:done + times] << payload

    def hang(self, method: str, path: str, times: int, seconds: float) -> None:
        """The next ``times`` requests to ``path`` answer only after ``seconds``."""
        async def slow():
            await asyncio.sleep(seconds)
            raise NotImplementedError  # kmock: no answer here, serve the request normally

        self.fail(method, path, times, lambda: slow())

    # --- objects ----------------------------------------------------------------

    def _items(self, resource: str, namespace: str | None):
        group = resource.rsplit("/", 2)[0] if resource.count("/") == 2 else ""
        plural = resource.rsplit("/", 1)[-1]
        for (res, ns, name), obj in self.kmock.objects.items():
            if res.plural == plural and res.group == group and ns == namespace \
                    and not obj.deleted:
                yield name, obj

    def get(self, resource: str, name: str, namespace: str | None = NS) -> dict | None:
        for found, obj in self._items(resource, namespace):
            if found == name:
                return json.loads(json.dumps(dict(obj.raw)))
        return None

    def names(self, resource: str, namespace: str | None = NS) -> list[str]:
        return sorted(name for name, _ in self._items(resource, namespace))

    def put(self, resource: str, obj: dict, namespace: str | None = NS) -> None:
        self.kmock.objects[resource, namespace, obj["metadata"]["name"]] = obj

    def patch(self, resource: str, name: str, changes: dict, namespace: str | None = NS) -> None:
        for found, obj in self._items(resource, namespace):
            if found == name:
                obj.patch(changes)
                return
        raise KeyError(f"no {resource} {namespace}/{name}")

    def replace_lease(self, name: str, spec: dict, namespace: str = NS) -> str:
        """Another party writes the Lease (a new resourceVersion): stale writers get 409."""
        key = (LEASES, namespace, name)
        lease = self.get(LEASES, name, namespace) or {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace}}
        lease["spec"] = {**lease.get("spec", {}), **spec}
        version = self.kmock.next_version()
        lease["metadata"]["resourceVersion"] = version
        self.kmock.objects[key] = lease
        return version

    def add_node(self, name: str = NODE, cards: int = 8, images: list[str] = ()) -> None:
        self.put("v1/nodes", {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "furiosa.ai/npu.family": "rngd"}},
            "status": {"allocatable": {"cpu": "64", "furiosa.ai/rngd": str(cards)},
                       "images": [{"names": [i], "sizeBytes": 1} for i in images]},
        }, namespace=None)

    def add_pod(self, name: str, *, cards: int, namespace: str = "other", node: str = NODE,
                phase: str = "Running") -> None:
        self.put("v1/pods", {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{
                "name": "c", "resources": {"limits": {"furiosa.ai/rngd": str(cards)}}}]},
            "status": {"phase": phase},
        }, namespace=namespace)

    def start_pod(self, job_name: str, *, state: dict | None = None, phase: str = "Running",
                  node: str = NODE) -> str:
        """Play the Job controller: a pod from the Job's template, bound to ``node``."""
        job = self.get("batch/v1/jobs", job_name)
        assert job is not None, f"no Job {job_name}"
        template = job["spec"]["template"]
        name = f"{job_name}-{uuid.uuid4().hex[:5]}"
        self.put("v1/pods", {
            "metadata": {"name": name, "namespace": NS, "uid": str(uuid.uuid4()),
                         "labels": {**template["metadata"]["labels"], "job-name": job_name},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {**template["spec"], "nodeName": node},
            "status": {"phase": phase, "containerStatuses": [{
                "name": "trainer", "image": template["spec"]["containers"][0]["image"],
                "imageID": "registry.example/furiosa-llm@sha256:" + "ab" * 32,
                "state": state or {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}]},
        })
        return name

    def set_pod(self, name: str, *, phase: str, state: dict, reason: str | None = None,
                message: str | None = None) -> None:
        pod = self.get("v1/pods", name)
        status = pod["status"]
        status["phase"] = phase
        status["containerStatuses"][0]["state"] = state
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        # kmock merges dicts but replaces lists: a whole new status replaces the old one.
        self.patch("v1/pods", name, {"status": status})

    def finish_job(self, name: str, kind: str, reason: str | None = None) -> None:
        self.patch("batch/v1/jobs", name, {"status": {"conditions": [
            {"type": kind, "status": "True", "reason": reason or kind}]}})

    def log(self, pod: str, lines: list[tuple[str, str]]) -> None:
        self.kmock.logs.setdefault((NS, pod), []).extend(lines)
