"""The control plane itself: its admission chain is the real one (PodSecurity, ResourceQuota,
LimitRanger), so the launcher's tests against it meet what a cluster admin's namespace does."""

from __future__ import annotations

import pytest
from admin import ApiError, wait_for
from conftest import NODE


def _namespace(admin, name: str, labels: dict | None = None) -> str:
    admin.request("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels or {}}})
    return name


def _pod(name: str, *, seccomp: str | None = None, cpu: str | None = None) -> dict:
    container = {"name": "c", "image": "registry.example/x:1"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    spec = {"nodeName": NODE, "containers": [container]}
    if seccomp:
        spec["securityContext"] = {"seccompProfile": {"type": seccomp}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_pod_security_at_baseline_forbids_an_unconfined_pod(admin):
    ns = _namespace(admin, "psa-baseline", {"pod-security.kubernetes.io/enforce": "baseline"})
    with pytest.raises(ApiError) as refused:
        admin.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod("p", seccomp="Unconfined"))
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value)


def test_a_resource_quota_refuses_a_pod_past_it(admin):
    ns = _namespace(admin, "quota")
    admin.request("POST", f"/api/v1/namespaces/{ns}/resourcequotas", {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "cpu"},
        "spec": {"hard": {"requests.cpu": "1", "limits.cpu": "1"}}})
    # Admission counts against the status the quota controller (kube-controller-manager) writes.
    wait_for(lambda: (admin.get(f"/api/v1/namespaces/{ns}/resourcequotas/cpu")
                      .get("status") or {}).get("hard"), "the quota's status")
    with pytest.raises(ApiError) as refused:
        admin.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod("big", cpu="2"))
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value)


def test_a_limit_range_gives_a_pod_without_requests_its_defaults(admin):
    ns = _namespace(admin, "limits")
    admin.request("POST", f"/api/v1/namespaces/{ns}/limitranges", {
        "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"memory": "64Mi"},
                             "default": {"memory": "128Mi"}}]}})
    pod = admin.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod("plain"))
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}}
