"""deploy/: the RBAC grants exactly what the doctor checks, and the example config loads."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _rules(kind: str, name: str = "rngdctl") -> set[tuple[str, str, str]]:
    docs = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    return {(group, resource, verb)
            for doc in docs if doc["kind"] == kind
            and doc["metadata"]["name"] in (name, f"{name}-node-reader")
            for rule in doc["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]
            for verb in rule["verbs"]}


def test_the_rbac_grants_every_permission_the_doctor_checks_and_no_more():
    from daemon.launchers.k8s.doctor import PERMISSIONS

    wanted_ns = {(g, r + (f"/{s}" if s else ""), v) for v, r, s, g, ns in PERMISSIONS if ns}
    wanted_cluster = {(g, r + (f"/{s}" if s else ""), v)
                      for v, r, s, g, ns in PERMISSIONS if not ns}
    assert _rules("Role") == wanted_ns
    assert _rules("ClusterRole") == wanted_cluster


def test_the_daemon_example_sees_the_hosts_processes_and_devices():
    deployment = yaml.safe_load((DEPLOY / "daemon-on-node.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["containers"][0]["securityContext"]["runAsUser"] == 0
    assert {"name": "dev-rngd", "hostPath": {"path": "/dev/rngd"}} in pod["volumes"]


def test_the_example_config_loads_and_its_volumes_build():
    from daemon.home import parse_config
    from daemon.launchers.k8s.jobspec import volumes

    config = parse_config((DEPLOY / "config.toml.example").read_text())
    assert config.gates.consecutive == 2 and config.daemon.launcher == "k8s"
    _, mounts = volumes(config.k8s)
    assert [m["mountPath"] for m in mounts] == ["/models", "/cache"]


def test_the_agents_rbac_grants_every_permission_doctor_agent_checks_and_no_more():
    from daemon.launchers.k8s.doctor import AGENT_PERMISSIONS

    wanted_ns = {(g, r, v) for v, r, s, g, ns in AGENT_PERMISSIONS if ns}
    wanted_cluster = {(g, r, v) for v, r, s, g, ns in AGENT_PERMISSIONS if not ns}
    assert _rules("Role", "rngdctl-agent") == wanted_ns
    assert _rules("ClusterRole", "rngdctl-agent") == wanted_cluster


def test_the_agent_daemonset_sees_the_hosts_processes_and_knows_its_node():
    daemonset = yaml.safe_load((DEPLOY / "agent-daemonset.yaml").read_text())
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["kind"] == "DaemonSet" and pod["hostPID"] is True
    assert pod["serviceAccountName"] == "rngdctl-agent"
    [env] = pod["containers"][0]["env"]
    assert env == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


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
