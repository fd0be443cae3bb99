"""deploy/: the RBAC grants exactly what the doctor checks, and the example config loads."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
JOBS_NS, AGENTS_NS = "ml", "rngdctl-agents"


def _docs(name: str = "*.yaml") -> list[dict]:
    return [doc for path in sorted(DEPLOY.glob(name))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def _rules(kind: str, name: str, namespace: str | None = None,
           file: str = "rbac.yaml") -> set[tuple[str, str, str]]:
    return {(group, resource, verb)
            for doc in _docs(file) if doc["kind"] == kind and doc["metadata"]["name"] == name
            and doc["metadata"].get("namespace") == namespace
            for rule in doc["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]
            for verb in rule["verbs"]}


def _wanted(permissions, where) -> set[tuple[str, str, str]]:
    return {(g, r + (f"/{s}" if s else ""), v) for v, r, s, g, ns in permissions if ns == where}


def test_the_rbac_grants_every_permission_the_doctor_checks_and_no_more():
    from daemon.launchers.k8s.doctor import AGENTS, PERMISSIONS

    assert _rules("Role", "rngdctl", JOBS_NS) == _wanted(PERMISSIONS, True)
    assert _rules("Role", "rngdctl-agent-readings", AGENTS_NS) == _wanted(PERMISSIONS, AGENTS)
    assert _rules("ClusterRole", "rngdctl-node-reader") == _wanted(PERMISSIONS, False)


def test_nothing_is_granted_watch_since_the_daemon_and_agents_only_list_and_get():
    verbs = {verb for doc in _docs() if doc["kind"] in ("Role", "ClusterRole")
             for rule in doc["rules"] for verb in rule["verbs"]}
    assert "watch" not in verbs
    client = (DEPLOY.parent / "daemon" / "launchers" / "k8s" / "client.py").read_text()
    assert "watch" not in client


def test_every_object_in_deploy_is_defined_once():
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in _docs()]
    assert sorted(k for k in set(keys) if keys.count(k) > 1) == []


def _pod_specs(namespace: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in _docs()
            if d["kind"] in ("Deployment", "DaemonSet")
            and d["metadata"]["namespace"] == namespace}


def test_the_jobs_namespace_holds_nothing_privileged_and_the_agents_one_is_privileged():
    jobs_ns = _pod_specs(JOBS_NS)
    assert set(jobs_ns) == {"rngdctl-daemon"}
    for pod in jobs_ns.values():
        assert not pod.get("hostPID") and not any("hostPath" in v for v in pod.get("volumes", []))
        assert not any((c.get("securityContext") or {}).get("capabilities")
                       for c in pod["containers"])
    assert set(_pod_specs(AGENTS_NS)) == {"rngdctl-agent", "rngdctl-daemon-on-node"}
    [namespace] = [d for d in _docs() if d["kind"] == "Namespace"]
    assert namespace["metadata"] == {"name": AGENTS_NS, "labels": {
        "pod-security.kubernetes.io/enforce": "privileged"}}


def test_the_daemon_example_on_the_node_sees_the_hosts_processes_and_devices():
    [deployment] = [d for d in _docs("daemon-on-node.yaml") if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["containers"][0]["securityContext"]["runAsUser"] == 0
    assert {"name": "dev-rngd", "hostPath": {"path": "/dev/rngd"}} in pod["volumes"]
    [account] = [d for d in _docs("daemon-on-node.yaml") if d["kind"] == "ServiceAccount"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    bound = {(d["kind"], d["roleRef"]["name"]) for d in _docs("daemon-on-node.yaml")
             if d["kind"].endswith("Binding")
             and d["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": AGENTS_NS}]}
    assert bound == {("RoleBinding", "rngdctl"), ("ClusterRoleBinding", "rngdctl-node-reader")}


def test_the_example_config_loads_and_its_volumes_build():
    from daemon.home import parse_config
    from daemon.launchers.k8s.jobspec import volumes

    config = parse_config((DEPLOY / "config.toml.example").read_text())
    assert config.gates.consecutive == 2 and config.daemon.launcher == "k8s"
    _, mounts = volumes(config.k8s)
    assert [m["mountPath"] for m in mounts] == ["/models", "/cache"]


def test_the_agents_rbac_grants_every_permission_doctor_agent_checks_and_no_more():
    from daemon.launchers.k8s.doctor import AGENT_PERMISSIONS, AGENTS

    file = "agent-daemonset.yaml"
    assert _rules("Role", "rngdctl-agent", AGENTS_NS, file) == _wanted(AGENT_PERMISSIONS, AGENTS)
    assert _rules("ClusterRole", "rngdctl-agent", None, file) == \
        _wanted(AGENT_PERMISSIONS, False)
    # Nothing of the agents' in the Jobs' namespace (the daemon's config is there).
    assert not [d for d in _docs() if d["kind"] in ("Role", "RoleBinding")
                and d["metadata"]["namespace"] == JOBS_NS
                and "rngdctl-agent" in {s["name"] for s in d.get("subjects", [])}]


def test_the_agent_daemonset_sees_the_hosts_processes_and_knows_its_node():
    [daemonset] = [d for d in _docs("agent-daemonset.yaml") if d["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["metadata"]["namespace"] == AGENTS_NS and pod["hostPID"] is True
    assert pod["serviceAccountName"] == "rngdctl-agent"
    [env] = pod["containers"][0]["env"]
    assert env == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    command = pod["containers"][0]["command"]
    assert command[command.index("--namespace") + 1] == AGENTS_NS


def _daemon_deployment() -> dict[str, dict]:
    docs = yaml.safe_load_all((DEPLOY / "daemon-deployment.yaml").read_text())
    return {doc["kind"]: doc for doc in docs}


def test_the_daemon_deployment_runs_two_replicas_that_elect_a_leader_on_the_granted_lease():
    from daemon.home import parse_config

    docs = _daemon_deployment()
    deployment, config_map = docs["Deployment"], docs["ConfigMap"]
    config = parse_config(config_map["data"]["config.toml"])
    assert deployment["spec"]["replicas"] == 2
    assert config.k8s.leader_election and config.daemon.launcher == "k8s" and config.k8s.agents
    assert config.k8s.agent_namespace == AGENTS_NS
    rbac = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    [role] = [d for d in rbac if d["kind"] == "Role" and d["metadata"]["name"] == "rngdctl"]
    named = [r for r in role["rules"] if r["resources"] == ["leases"] and "resourceNames" in r]
    assert [r["resourceNames"] for r in named] == [[config.k8s.lease_name]]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == role["metadata"]["name"]
    assert {d["metadata"]["namespace"] for d in docs.values()} == {config.k8s.namespace} \
        == {role["metadata"]["namespace"]}
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_the_daemon_replicas_share_one_read_write_once_volume_on_one_node():
    docs = _daemon_deployment()
    claim, deployment = docs["PersistentVolumeClaim"], docs["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    [home] = [v for v in pod["volumes"] if v["name"] == "home"]
    assert home["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    # RWO attaches to one node: both replicas must be scheduled there.
    [term] = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["template"]["metadata"][
        "labels"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    command = pod["containers"][0]["command"]
    assert command[command.index("--home") + 1] == mounts["home"]
