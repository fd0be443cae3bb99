"""Where the client connects: KUBECONFIG, ~/.kube/config, a context, or a service account."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_cluster_env(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    return tmp_path / "user"


def test_without_kubeconfig_env_the_users_kube_config_is_read(cluster, no_cluster_env):
    from daemon.launchers.k8s.client import connect

    (no_cluster_env / ".kube").mkdir(parents=True)
    (no_cluster_env / ".kube" / "config").write_text(cluster.kubeconfig.read_text())
    api, conn = connect()
    assert conn.source.endswith(".kube/config") and conn.context == "emu"
    assert conn.server == cluster.url
    api.close()


def test_a_context_that_the_kubeconfig_lacks_is_one_clear_error(cluster):
    from daemon.launchers.k8s.client import K8sConfigError, connect

    with pytest.raises(K8sConfigError, match="kubeconfig: .*prod"):
        connect("prod")


def test_in_a_pod_the_service_account_is_used(no_cluster_env, monkeypatch, tmp_path):
    from kubernetes.config import incluster_config

    from daemon.launchers.k8s.client import K8sConfigError, connect

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    # The service account's files live under /var/run/secrets in a pod; point there.
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    api, conn = connect()
    assert (conn.source, conn.server) == ("in-cluster service account", "https://10.96.0.1:443")
    api.close()
    with pytest.raises(K8sConfigError, match="--context prod: there is no kubeconfig in a pod"):
        connect("prod")


def test_with_neither_a_kubeconfig_nor_a_pod_the_error_says_what_to_set(no_cluster_env):
    from daemon.launchers.k8s.client import K8sConfigError, connect

    with pytest.raises(K8sConfigError, match="set KUBECONFIG or create ~/.kube/config"):
        connect()
