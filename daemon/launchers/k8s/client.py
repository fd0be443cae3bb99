"""Every call rngdctl makes to the Kubernetes API, in one place.

The official ``kubernetes`` client supplies the connection: kubeconfig (the
``KUBECONFIG`` list, else ``~/.kube/config``, with an optional context) or the
in-cluster service account, TLS and auth. Requests go through its
``ApiClient`` as plain JSON: objects in and out are dicts, so the Job is built
as data (``jobspec``) and read as data (``cluster``).

Every request has a timeout. Transient failures (no connection, a timeout,
429, 5xx) are retried with jittered exponential backoff; when the retries run
out the call raises ``K8sUnavailable``. A 404 returns None where "absent" is
an answer (reads, deletes); any other 4xx raises ``K8sRejected`` at once.

Only the Kubernetes side imports this module (the launcher, ``doctor``, ``leader``,
``agent``): it imports the Kubernetes client, which the light commands must not load.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from daemon.errors import RngdctlError

log = logging.getLogger("rngdctl.k8s")

TRANSIENT_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})


# === errors ==================================================================


class K8sError(RngdctlError):
    """A Kubernetes API call did not give the answer we need."""


class K8sConfigError(K8sError):
    """No usable kubeconfig or in-cluster configuration."""

    exit_code = 2


class K8sUnavailable(K8sError):
    """The API did not answer (or answered 429/5xx) after every retry."""


class K8sRejected(K8sError):
    """The API refused the request (a 4xx other than 404 where absence is an answer)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class K8sConflict(K8sRejected):
    """409: the object already exists."""


# === connection ==============================================================


@dataclass(frozen=True)
class Connection:
    """Where the client talks to, for messages and the doctor."""

    source: str  # "kubeconfig FILE" or "in-cluster"
    context: str | None
    server: str


def connect(context: str | None = None) -> tuple[k8s_client.ApiClient, Connection]:
    """An ApiClient from kubeconfig (``KUBECONFIG``, ``~/.kube/config``) or in-cluster config."""
    configuration = k8s_client.Configuration()
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    files = [f for f in kubeconfig.split(os.pathsep) if f]
    try:
        if any(Path(f).expanduser().exists() for f in files):
            k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                        client_configuration=configuration,
                                        persist_config=False)
            _, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
            source = f"kubeconfig {kubeconfig}"
            context = context or (active or {}).get("name")
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            if context:
                raise K8sConfigError(f"--context {context}: there is no kubeconfig in a pod; "
                                     "mount one and set KUBECONFIG")
            k8s_config.load_incluster_config(client_configuration=configuration)
            source = "in-cluster service account"
        else:
            raise K8sConfigError("no kubeconfig (set KUBECONFIG or create ~/.kube/config) "
                                 "and not running in a pod")
    except k8s_config.ConfigException as exc:
        raise K8sConfigError(f"kubeconfig: {exc}") from None
    # Our own loop retries with backoff and counts every attempt; urllib3's
    # silent retries would hide both.
    configuration.retries = False
    return k8s_client.ApiClient(configuration), Connection(source, context, configuration.host)


# === the client ==============================================================


def _label_match(obj: dict, labels: dict[str, str] | None) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in (labels or {}).items())


def _selector(labels: dict[str, str] | None) -> str | None:
    return ",".join(f"{k}={v}" for k, v in labels.items()) if labels else None


def _status_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
        return body.get("message") or exc.reason or ""
    except (TypeError, ValueError):
        return (exc.reason or "") if not exc.body else str(exc.body)[:200]


class K8sClient:
    """The API calls the launcher and the doctor make; each returns plain dicts.

    ``calls`` counts HTTP requests by operation (retries included), for the
    calls-per-tick benchmark. ``on_event(kind, message)`` hears about calls
    that needed retries, so the launcher can store them as events.
    """

    def __init__(self, api: k8s_client.ApiClient, *, timeout: float = 15.0, retries: int = 4,
                 backoff: float = 0.5, max_backoff: float = 8.0,
                 on_event: Callable[[str, str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.api = api
        self.timeout = (min(5.0, timeout), timeout)  # (connect, read) seconds
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.on_event = on_event
        self.sleep = sleep
        self.calls: collections.Counter[str] = collections.Counter()

    @classmethod
    def from_config(cls, k8s, *, on_event=None) -> tuple[K8sClient, Connection]:
        """A client for a ``K8sConfig`` (context, timeout and retry settings)."""
        api, conn = connect(k8s.context)
        return cls(api, timeout=float(k8s.request_timeout), retries=int(k8s.retries),
                   backoff=float(k8s.retry_backoff), on_event=on_event), conn

    def close(self) -> None:
        try:
            self.api.close()
        except Exception:  # closing a pool must not break the daemon's stop
            log.debug("closing the API client failed", exc_info=True)

    # --- the one request path ---------------------------------------------

    def _request(self, op: str, method: str, path: str, *, query: list | None = None,
                 body: Any = None, text: bool = False, absent_ok: bool = False,
                 content_type: str = "application/json") -> Any:
        """One API request with timeout and retries; JSON (or text) back, None if absent."""
        # A log is text, but the apiserver negotiates its serializers (JSON, YAML, protobuf)
        # for every request and answers 406 to an Accept that names none of them (a bare
        # text/plain): */*, as kubectl and the official client send.
        headers = {"Accept": "*/*" if text else "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        last = ""
        for attempt in range(self.retries + 1):
            self.calls[op] += 1
            params = self.api.param_serialize(
                method=method, resource_path=path, query_params=list(query or []),
                header_params=dict(headers), body=body, auth_settings=["BearerToken"])
            retry_after = None
            try:
                response = self.api.call_api(*params, _request_timeout=self.timeout)
                data = response.read()
                status = response.status
                if 200 <= status <= 299:
                    raw = data.decode("utf-8", errors="replace") if data else ""
                    try:
                        answer = raw if text else json.loads(raw) if raw else {}
                        if not text and not isinstance(answer, dict):
                            raise ValueError("not a JSON object")
                    except ValueError:
                        # A 2xx that is not a JSON object: a proxy or gateway page, not the API.
                        last = f"{status} with a body that is not a JSON object: {raw[:80]!r}"
                        if attempt < self.retries:
                            self.sleep(self._delay(attempt, None))
                        continue
                    if attempt and self.on_event:
                        self.on_event("k8s_retry", f"{op} answered after {attempt} "
                                      f"retr{'y' if attempt == 1 else 'ies'} (last: {last})")
                    return answer
                exc = ApiException(http_resp=response)
                exc.body = data.decode("utf-8", errors="replace") if data else ""
                retry_after = response.headers.get("Retry-After") if response.headers else None
                raise exc
            except ApiException as exc:
                status = exc.status or 0
                if status == 404 and absent_ok:
                    return None
                message = f"{status} {_status_message(exc)}".strip()
                if status not in TRANSIENT_STATUSES:
                    kind = K8sConflict if status == 409 else K8sRejected
                    raise kind(f"{op}: {message}", status) from None
                last = message
            except (TimeoutError, urllib3.exceptions.HTTPError, OSError) as exc:
                last = f"{type(exc).__name__}: {str(exc)[:160]}"
                retry_after = None
            if attempt < self.retries:
                self.sleep(self._delay(attempt, retry_after))
        raise K8sUnavailable(f"{op}: no answer after {self.retries + 1} attempts ({last})")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**attempt)], or the server's Retry-After."""
        if retry_after:
            try:
                return min(self.max_backoff, float(retry_after))
            except ValueError:
                pass
        return random.uniform(0, min(self.max_backoff, self.backoff * (2 ** attempt)))

    # --- cluster ------------------------------------------------------------

    def version(self) -> dict:
        return self._request("version", "GET", "/version")

    def read_node(self, name: str) -> dict | None:
        return self._request("read_node", "GET", f"/api/v1/nodes/{name}", absent_ok=True)

    def read_pvc(self, namespace: str, name: str) -> dict | None:
        return self._request("read_pvc", "GET",
                             f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}",
                             absent_ok=True)

    def list_nodes(self) -> list[dict]:
        return self._request("list_nodes", "GET", "/api/v1/nodes").get("items") or []

    def pods_on_node(self, node: str) -> list[dict]:
        """Pods of every namespace bound to ``node`` (the selector is also applied here)."""
        found = self._request("list_pods_on_node", "GET", "/api/v1/pods",
                              query=[("fieldSelector", f"spec.nodeName={node}")])
        return [p for p in found.get("items") or []
                if (p.get("spec") or {}).get("nodeName") == node]

    def list_resource_slices(self, driver: str) -> list[dict] | None:
        """The DRA ResourceSlices of ``driver`` (cluster-wide); None where the API does not
        serve resource.k8s.io/v1 (no DRA)."""
        found = self._request("list_resource_slices", "GET",
                              "/apis/resource.k8s.io/v1/resourceslices",
                              query=[("fieldSelector", f"spec.driver={driver}")],
                              absent_ok=True)
        if found is None:
            return None
        return [s for s in found.get("items") or []
                if (s.get("spec") or {}).get("driver") == driver]

    def access_review(self, *, verb: str, resource: str, namespace: str | None = None,
                      group: str = "", subresource: str | None = None,
                      name: str | None = None) -> tuple[bool, str]:
        attributes = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attributes["namespace"] = namespace
        if name:
            attributes["name"] = name
        if subresource:
            attributes["subresource"] = subresource
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes}}
        answer = self._request("access_review", "POST",
                               "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                               body=body)
        status = answer.get("status") or {}
        return bool(status.get("allowed")), status.get("reason") or ""

    # --- jobs ---------------------------------------------------------------

    def create_job(self, namespace: str, job: dict) -> dict:
        return self._request("create_job", "POST",
                             f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job)

    def read_job(self, namespace: str, name: str) -> dict | None:
        return self._request("read_job", "GET",
                             f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                             absent_ok=True)

    def list_jobs(self, namespace: str, labels: dict[str, str]) -> list[dict]:
        found = self._request("list_jobs", "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs",
                              query=[("labelSelector", _selector(labels))])
        return [j for j in found.get("items") or [] if _label_match(j, labels)]

    def delete_job(self, namespace: str, name: str) -> bool:
        """Delete a Job and (in the background) its pods; False if it was already gone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        found = self._request("delete_job", "DELETE",
                              f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                              body=body, absent_ok=True)
        return found is not None

    # --- pods ---------------------------------------------------------------

    def list_pods(self, namespace: str, labels: dict[str, str]) -> list[dict]:
        found = self._request("list_pods", "GET", f"/api/v1/namespaces/{namespace}/pods",
                              query=[("labelSelector", _selector(labels))])
        return [p for p in found.get("items") or [] if _label_match(p, labels)]

    def read_pod(self, namespace: str, name: str) -> dict | None:
        return self._request("read_pod", "GET", f"/api/v1/namespaces/{namespace}/pods/{name}",
                             absent_ok=True)

    def create_pod(self, namespace: str, pod: dict) -> dict:
        return self._request("create_pod", "POST", f"/api/v1/namespaces/{namespace}/pods",
                             body=pod)

    def delete_pod(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        body: dict = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        found = self._request("delete_pod", "DELETE",
                              f"/api/v1/namespaces/{namespace}/pods/{name}",
                              body=body, absent_ok=True)
        return found is not None

    def pod_log(self, namespace: str, name: str, *, since_time: str | None = None,
                container: str | None = None, limit_bytes: int | None = None) -> str | None:
        """The pod's log with RFC 3339 timestamps, from ``since_time`` (whole seconds) on,
        at most ``limit_bytes`` of it (cut here too when a server does not)."""
        query = [("timestamps", "true")]
        if since_time:
            query.append(("sinceTime", since_time))
        if container:
            query.append(("container", container))
        if limit_bytes:
            query.append(("limitBytes", str(limit_bytes)))
        body = self._request("pod_log", "GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log",
                             query=query, text=True, absent_ok=True)
        if body and body.startswith('"') and body.endswith('"'):
            # A JSON-encoded string (some proxies and emulators wrap text/plain so).
            try:
                body = json.loads(body)
            except ValueError:
                pass
        if body and limit_bytes and len(body) > limit_bytes // 4:
            data = body.encode("utf-8", errors="surrogateescape")
            if len(data) > limit_bytes:
                body = data[:limit_bytes].decode("utf-8", errors="replace")
        return body

    # --- every node at once (agents) ------------------------------------------

    def list_live_pods(self) -> list[dict]:
        """Pods of every namespace that have not finished: cards requested on each node."""
        found = self._request("list_live_pods", "GET", "/api/v1/pods", query=[
            ("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")])
        return [p for p in found.get("items") or []
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def list_configmaps(self, namespace: str, labels: dict[str, str]) -> list[dict]:
        found = self._request("list_configmaps", "GET",
                              f"/api/v1/namespaces/{namespace}/configmaps",
                              query=[("labelSelector", _selector(labels))])
        return [c for c in found.get("items") or [] if _label_match(c, labels)]

    def create_configmap(self, namespace: str, body: dict) -> dict:
        return self._request("create_configmap", "POST",
                             f"/api/v1/namespaces/{namespace}/configmaps", body=body)

    def patch_configmap(self, namespace: str, name: str, changes: dict) -> dict | None:
        """A JSON merge patch; None when the ConfigMap does not exist. The answer is the
        ConfigMap as patched (``{}``: as it is)."""
        return self._request("patch_configmap", "PATCH",
                             f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                             body=changes, absent_ok=True,
                             content_type="application/merge-patch+json")

    # --- leader election (daemon/launchers/k8s/leader.py) --------------------------------

    def read_lease(self, namespace: str, name: str) -> dict | None:
        return self._request("read_lease", "GET",
                             f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
                             absent_ok=True)

    def create_lease(self, namespace: str, body: dict) -> dict:
        """Raises K8sConflict when another replica created it first."""
        return self._request("create_lease", "POST",
                             f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
                             body=body)

    def replace_lease(self, namespace: str, name: str, body: dict) -> dict:
        """PUT guarded by ``body.metadata.resourceVersion``: K8sConflict when it is stale."""
        return self._request("replace_lease", "PUT",
                             f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
                             body=body)
