"""The test's own hands on the real control plane: admin API calls over plain HTTPS (not the
client under test), the kwok node, and the trainer's side of a pod: its log lines and its
exit, which kwok then plays to the apiserver as a kubelet would.
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import time
import urllib.error
import urllib.request

from control_plane import FAKE_NODE, ControlPlane

REQUEST_TIMEOUT_S = 15.0
EXIT_ANNOTATION = "rngdctl.test/exit-code"  # kwok-stages.yaml's pod-exit stage reads it
LOGS = "/apis/kwok.x-k8s.io/v1alpha1/namespaces/{ns}/logs"


class ApiError(RuntimeError):
    """The API answered an error other than 404: its status and message."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status} {message}")
        self.status = status


class Admin:
    """``system:masters`` over HTTPS; objects in and out are dicts."""

    def __init__(self, plane: ControlPlane):
        self.plane = plane
        self.server = plane.server
        self.tls = ssl.create_default_context(cafile=str(plane.pki / "ca.crt"))
        self.tls.load_cert_chain(plane.pki / "admin.crt", plane.pki / "admin.key")

    def request(self, method: str, path: str, body: dict | None = None, *,
                content_type: str = "application/json", warnings: list | None = None
                ) -> dict | None:
        """The answer's JSON; None for a 404. The API's warnings (``Warning`` headers) are
        appended to ``warnings`` when given."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type,
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S,
                                        context=self.tls) as answer:
                raw = answer.read()
                if warnings is not None:
                    warnings.extend(answer.headers.get_all("Warning") or [])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise ApiError(exc.code, exc.read().decode(errors="replace")[:400]) from None
        return json.loads(raw) if raw else {}

    def get(self, path: str) -> dict | None:
        return self.request("GET", path)

    def items(self, path: str) -> list[dict]:
        return (self.get(path) or {}).get("items") or []

    def merge_patch(self, path: str, changes: dict) -> dict | None:
        return self.request("PATCH", path, changes, content_type="application/merge-patch+json")

    # --- the node ---------------------------------------------------------------

    def add_node(self, name: str, *, cards: int, images: list[str],
                 hostname: str | None = None) -> dict:
        """A node kwok plays the kubelet of, with ``cards`` RNGD cards and ``images`` pulled,
        its ``kubernetes.io/hostname`` label ``hostname`` (default: its name); returned once
        kwok has made it Ready."""
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110",
                     "furiosa.ai/rngd": str(cards)}
        self.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(FAKE_NODE), "labels": {
                "kubernetes.io/hostname": hostname or name, "kubernetes.io/os": "linux",
                "furiosa.ai/npu.family": "rngd", "type": "kwok"}},
            "status": {"capacity": resources, "allocatable": resources,
                       "images": [{"names": images, "sizeBytes": 1 << 30}]}})
        return wait_for(lambda: _ready(self.get(f"/api/v1/nodes/{name}")),
                        f"node {name} Ready (kwok)")

    # --- a pod, as its container would -----------------------------------------

    def running_pod(self, namespace: str, job: str, timeout: float = 60) -> dict:
        """The Job's pod once the scheduler bound it and kwok runs it."""
        def find():
            pods = self.items(f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                              f"job-name%3D{job}")
            return next((p for p in pods if (p.get("status") or {}).get("phase") == "Running"),
                        None)
        return wait_for(find, f"a Running pod of Job {namespace}/{job}", timeout)

    def write_log(self, namespace: str, pod: str, container: str, lines: list[str]) -> None:
        """Append ``lines`` to the container's log (CRI format, stamped now) and have kwok
        serve that file as the container's log."""
        path = self.plane.pod_logs / f"{namespace}_{pod}_{container}.log"
        fresh = not path.exists()
        with open(path, "a", encoding="utf-8") as fh:
            fh.writelines(f"{_now_stamp()} stdout F {line}\n" for line in lines)
        if fresh:
            self.request("POST", LOGS.format(ns=namespace), {
                "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": [{"containers": [container], "logsFile": str(path)}]}})

    def exit_pod(self, namespace: str, pod: str, code: int) -> None:
        """The container exits with ``code`` (kwok's pod-exit stage reads the annotation)."""
        self.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{pod}",
                         {"metadata": {"annotations": {EXIT_ANNOTATION: str(code)}}})


def _ready(node: dict | None) -> dict | None:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return node if ready else None


def _now_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def wait_for(probe, what: str, timeout: float = 60, every: float = 0.2):
    """``probe()``'s first truthy answer; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s")
        time.sleep(every)
