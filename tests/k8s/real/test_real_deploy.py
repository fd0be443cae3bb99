"""deploy/ on a real apiserver: applied server-side by kubectl, and deploy/rbac.yaml judged by
the real RBAC authorizer for the daemon's and the agents' ServiceAccounts."""

from __future__ import annotations

import pytest
import yaml
from conftest import NS, REPO


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
