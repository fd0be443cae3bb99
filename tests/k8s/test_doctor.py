"""rngdctl doctor against the emulator: each check's mark, detail and fix."""

from __future__ import annotations

from k8s_emulator import NODE


def _checks(config, proc):
    from daemon.launchers.k8s.doctor import run_checks

    return {c.name: c for c in run_checks(config, proc=str(proc))}


def test_doctor_passes_every_cluster_check_on_a_ready_cluster(cluster, config, proc):
    checks = _checks(config, proc)
    assert checks["kubeconfig"].ok and "context emu" in checks["kubeconfig"].detail
    assert checks["API answers"].ok and "v1.26" in checks["API answers"].detail
    assert checks["may create jobs"].ok and checks["may get pods/log"].ok
    assert checks["may list nodes"].ok
    assert checks["node"].detail == f"{NODE}: 8 allocatable furiosa.ai/rngd"
    assert checks["image"].ok


def test_doctor_names_a_missing_permission_and_the_fix(cluster, config, proc):
    cluster.kmock.denied.add(("delete", "jobs"))
    check = _checks(config, proc)["may delete jobs"]
    assert not check.ok and "deploy/rbac.yaml" in check.fix


def test_doctor_says_when_race_safety_is_off_and_how_to_fix_it(cluster, config, proc):
    check = _checks(config, proc)["race safety"]
    assert not check.ok and check.fix.startswith("set [gates] consecutive = 2")


def test_doctor_without_a_kubeconfig_says_how_to_get_one(tmp_path, monkeypatch, config, proc):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    check = _checks(config, proc)["kubeconfig"]
    assert not check.ok and "KUBECONFIG" in check.fix


def test_the_doctor_command_prints_marks_and_exits_1_on_a_failed_check(cluster, home, rngdctl):
    home.config_path.write_text(
        '[k8s]\nnamespace = "ml"\nnode = "rngd-node-1"\nimage = "absent:1"\nretries = 0\n')
    code, out, err = rngdctl("doctor", env={"KUBECONFIG": str(cluster.kubeconfig)})
    assert code == 1, err
    assert "✓ API answers: Kubernetes v1.26" in out
    assert "✗ image: absent:1 is not in rngd-node-1's status.images" in out
    assert "    fix: the daemon pre-pulls it" in out


def test_doctor_says_when_the_api_does_not_answer_and_skips_what_needs_it(
        cluster, config, proc, dead_api):
    checks = _checks(config, proc)
    assert checks["kubeconfig"].ok
    api = checks["API answers"]
    assert not api.ok and "kubectl get --raw /version" in api.fix
    assert "node" not in checks and "may create jobs" not in checks
    assert checks["/proc visible"].ok  # host checks still run


def test_doctor_names_a_node_that_does_not_exist(cluster, config, proc):
    config.k8s.node = "rngd-node-9"
    check = _checks(config, proc)["node"]
    assert not check.ok and check.detail == "node rngd-node-9 does not exist"


def test_doctor_says_when_the_node_has_no_cards_to_offer(cluster, config, proc):
    cluster.add_node(NODE, cards=0)
    check = _checks(config, proc)["node"]
    assert not check.ok and check.fix == "install the Furiosa device plugin on the node"


def test_doctor_sees_every_process_when_proc_is_fully_readable(cluster, config, proc):
    check = _checks(config, proc)["/proc visible"]
    assert check.ok and "device holders are seen" in check.detail


def test_doctor_agent_checks_the_agents_rights_and_names_a_missing_one(cluster, config, proc):
    from daemon.launchers.k8s.doctor import run_checks

    checks = {c.name: c for c in run_checks(config, proc=str(proc), agent=True)}
    assert checks["may patch configmaps"].ok and checks["may list pods"].ok
    assert "may create jobs" not in checks and "node" not in checks
    cluster.kmock.denied.add(("patch", "configmaps"))
    check = {c.name: c for c in run_checks(config, proc=str(proc), agent=True)}[
        "may patch configmaps"]
    assert not check.ok and "Role rngdctl-agent" in check.fix


def test_doctor_checks_that_the_daemon_may_list_the_agents_configmaps(cluster, config, proc):
    cluster.kmock.denied.add(("list", "configmaps"))
    assert not _checks(config, proc)["may list configmaps"].ok


def test_doctor_checks_the_leader_election_rights_on_the_configured_lease(cluster, config,
                                                                          proc):
    # deploy/rbac.yaml grants get/update on the Lease rngdctl-daemon only.
    cluster.kmock.named[("update", "leases")] = {"rngdctl-daemon"}
    cluster.kmock.named[("get", "leases")] = {"rngdctl-daemon"}
    checks = _checks(config, proc)
    assert checks["may create leases"].ok
    assert checks["may update leases rngdctl-daemon"].ok
    config.k8s.lease_name = "team-a-daemon"
    check = _checks(config, proc)["may update leases team-a-daemon"]
    assert not check.ok and "resourceNames" in check.fix


def test_doctor_names_a_node_whose_cards_are_partitioned_and_the_fix(cluster, config, proc):
    cluster.put("v1/nodes", {"metadata": {"name": NODE}, "status": {"allocatable": {
        "furiosa.ai/rngd-4core.24gb": "16"}}}, namespace=None)
    check = _checks(config, proc)["node"]
    assert not check.ok
    assert check.detail.startswith(f"node {NODE}'s cards are partitioned: 16 "
                                   "furiosa.ai/rngd-4core.24gb (8 cards)")
    assert check.fix.startswith("set the Furiosa device plugin to whole cards on this node")


def test_doctor_says_the_cards_are_the_device_plugins_where_no_dra_is_served(cluster, config,
                                                                            proc):
    check = _checks(config, proc)["DRA"]
    assert check.ok and check.detail.startswith("the API serves no resource.k8s.io/v1")
