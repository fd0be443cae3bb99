"""deploy/ on a real apiserver: applied server-side by kubectl, and deploy/rbac.yaml judged by
the real RBAC authorizer for the daemon's and the agents' ServiceAccounts."""

from __future__ import annotations

import pytest
import yaml
from admin import wait_for
from conftest import AGENTS_NS, NODE, NS, REPO


def _deploy_objects() -> set[tuple[str, str | None, str]]:
    return {(doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
            for path in sorted((REPO / "deploy").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc}


def test_kubectl_applies_deploy_server_side_and_every_object_is_there(plane, deployed):
    assert any(line.endswith("serverside-applied") for line in deployed)
    for kind, namespace, name in sorted(_deploy_objects(), key=str):
        scope = ["-n", namespace] if namespace else []
        assert plane.kubectl("get", kind.lower(), name, *scope, "-o", "name").strip()


def _api_checks(checks) -> list:
    """The doctor's checks that ask the API (this host's /proc and gates are not judged)."""
    return [c for c in checks if c.name not in ("kubeconfig", "/proc visible", "race safety")]


def test_the_daemon_account_may_do_everything_the_doctor_checks(as_daemon, config):
    from daemon.launchers.k8s.doctor import PERMISSIONS, run_checks

    config.k8s.output_volume = "rngdctl-output"  # deploy/output-pvc.yaml
    checks = _api_checks(run_checks(config))
    assert [c for c in checks if not c.ok] == []
    assert len([c for c in checks if c.name.startswith("may ")]) == len(PERMISSIONS)
    assert {"API answers", "node", "image", "output volume"} <= {c.name for c in checks}


def test_the_agent_account_may_do_what_doctor_agent_checks(agent_kubeconfig, monkeypatch,
                                                           config):
    from daemon.launchers.k8s.doctor import AGENT_PERMISSIONS, run_checks

    monkeypatch.setenv("KUBECONFIG", str(agent_kubeconfig))
    checks = _api_checks(run_checks(config, agent=True))
    assert [c for c in checks if not c.ok] == []
    assert len([c for c in checks if c.name.startswith("may ")]) == len(AGENT_PERMISSIONS)


def test_the_real_authorizer_refuses_the_daemon_what_rbac_does_not_grant(as_daemon, config):
    from daemon.launchers.k8s.client import K8sClient, K8sRejected

    client, _ = K8sClient.from_config(config.k8s)
    try:
        with pytest.raises(K8sRejected) as refused:  # the Role grants configmaps list only
            client.create_configmap(NS, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": "not-ours"}})
        assert refused.value.status == 403
        assert 'cannot create resource "configmaps"' in str(refused.value)
        assert client.access_review(verb="delete", resource="nodes") == (False, "")
        assert client.access_review(verb="list", resource="jobs", group="batch",
                                    namespace="kube-system")[0] is False
    finally:
        client.close()


def _workloads() -> list[tuple[str, dict]]:
    """Each Deployment's and DaemonSet's namespace and pod labels, in deploy/."""
    return [(doc["metadata"]["namespace"], doc["spec"]["selector"]["matchLabels"])
            for path in sorted((REPO / "deploy").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())
            if doc and doc["kind"] in ("Deployment", "DaemonSet")]


def test_the_jobs_namespace_passes_baseline_with_deploy_applied(admin, deployed):
    for namespace, labels in _workloads():  # every workload has made its pods
        selector = ",".join(f"{k}%3D{v}" for k, v in labels.items()).replace("/", "%2F")
        pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
        wait_for(lambda pods=pods: admin.items(pods), f"pods of {labels} in {namespace}")
    warnings: list[str] = []
    admin.request("PATCH", f"/api/v1/namespaces/{NS}?dryRun=All",
                  {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}},
                  content_type="application/merge-patch+json", warnings=warnings)
    assert warnings == []  # PodSecurity names every pod of ml that baseline would forbid


def _agent_client(agent_kubeconfig, monkeypatch, config):
    from daemon.launchers.k8s.client import K8sClient

    monkeypatch.setenv("KUBECONFIG", str(agent_kubeconfig))
    client, _ = K8sClient.from_config(config.k8s)
    return client


def test_an_agent_writes_its_own_nodes_configmap_and_no_other(agent_kubeconfig, monkeypatch,
                                                              config, admin, tmp_path):
    from daemon.gates import nodes
    from daemon.launchers.k8s.agent import Agent
    from daemon.launchers.k8s.client import K8sRejected

    client = _agent_client(agent_kubeconfig, monkeypatch, config)
    other = nodes.agent_configmap("rngd-node-2", AGENTS_NS, {}, heartbeat=1.0, tick=5.0)
    admin.request("POST", f"/api/v1/namespaces/{AGENTS_NS}/configmaps", other)
    try:
        def agent(node: str) -> Agent:
            return Agent(client, namespace=AGENTS_NS, node=node, proc=str(tmp_path),
                         read_cards=lambda: ([], "no furiosa-smi here"))

        for _ in range(2):  # created, then patched; a restarted agent reads it back so
            assert agent(NODE).publish()["data"]["node"] == NODE
        with pytest.raises(K8sRejected, match="writes only its own node's") as refused:
            agent("rngd-node-2").publish()  # the other node's ConfigMap, by name
        assert refused.value.status == 403
        forged = nodes.agent_configmap(NODE, AGENTS_NS, {}, heartbeat=1.0, tick=5.0)
        forged["data"]["node"] = "rngd-node-2"  # its own name, another node's readings
        with pytest.raises(K8sRejected, match="its own node's readings"):
            client.patch_configmap(AGENTS_NS, forged["metadata"]["name"], forged)
        with pytest.raises(K8sRejected) as refused:  # the daemon's config, in the Jobs' ns
            client.patch_configmap(NS, "rngdctl-config", {"data": {"config.toml": ""}})
        assert refused.value.status == 403
    finally:
        client.close()
        admin.request("DELETE", f"/api/v1/namespaces/{AGENTS_NS}/configmaps/"
                      f"{other['metadata']['name']}")


def test_doctor_says_no_dra_claims_are_placed_where_furiosas_driver_publishes_cards(
        as_daemon, config, admin):
    from daemon.launchers.k8s.doctor import run_checks

    slices = "/apis/resource.k8s.io/v1/resourceslices"
    admin.request("POST", slices, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "rngd-node-1-npu"},
        "spec": {"driver": "npu.furiosa.ai", "nodeName": NODE,
                 "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"npu{i}"} for i in range(2)]}})
    try:
        [dra] = [c for c in run_checks(config) if c.name == "DRA"]
    finally:
        admin.request("DELETE", f"{slices}/rngd-node-1-npu")
    assert not dra.ok
    assert dra.detail == (f"1 npu.furiosa.ai ResourceSlice(s), 2 device(s), on {NODE}: rngdctl "
                          f"places no DRA claims (its Jobs ask the device plugin's resource), "
                          f"and on {NODE} a card DRA allocates is not seen by its gates")
