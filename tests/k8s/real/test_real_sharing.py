"""A namespace and a cluster shared, on a real control plane: two rngdctl homes side by side,
a node whose name is not its hostname label, and what a trainer pod is given."""

from __future__ import annotations

import pytest
from admin import wait_for
from conftest import NS, Daemons, tick_until
from k8s_support import IMAGE

from daemon.home import Home
from daemon.run.spec import validate

#: A node name as long as a fully qualified one can be: past a label value's 63 characters.
LONG_NODE = "rngd-node-with-a-long-name.rack-12.row-4.datacenter-seoul-1.example.com"


def _job(admin, name: str) -> dict | None:
    return admin.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")


def _launched(daemon, store, run_id: int) -> str:
    tick_until(daemon, lambda: store.run(run_id)["status"] == "running", f"run {run_id} launched")
    return store.run(run_id)["job_name"]


@pytest.fixture
def second_home(tmp_path, config, idle_probe, daemons):
    """Another user's home: its own store (so its own id and its own run 1), same namespace."""
    home = Home(tmp_path / "home-b").ensure()
    store = home.store()
    made = Daemons(home, store, config, daemons.proc, idle_probe)
    yield made
    for daemon in list(made.running):
        made.stop(daemon)
    store.close()


def test_two_homes_in_one_namespace_each_run_and_cancel_their_own_run_1(
        daemons, second_home, submit, store, admin):
    a, b = daemons.start(), second_home.start()
    run_a = submit()
    job_a = _launched(a, store, run_a)
    run_b = second_home.store.add_run(validate({"cards": 2, "resident": 2, "steps": 5}))
    assert run_a == run_b == 1
    job_b = _launched(b, second_home.store, run_b)
    assert job_b != job_a and _job(admin, job_b) is not None  # its own Job, not an adopted one
    assert second_home.store.events(kinds=["adopt", "unknown_job"]) == []

    second_home.store.request_cancel(run_b)
    tick_until(b, lambda: second_home.store.run(run_b)["status"] == "cancelled",
               "home b's run 1 cancelled")
    wait_for(lambda: _job(admin, job_b) is None, f"home b's Job {job_b} gone")
    for _ in range(3):
        a.tick()
    assert store.run(run_a)["status"] == "running" and _job(admin, job_a) is not None

    store.request_cancel(run_a)
    tick_until(a, lambda: store.run(run_a)["status"] == "cancelled", "home a's run 1 cancelled")


@pytest.mark.parametrize("node, hostname", [
    ("rngd-node-named", "a-hostname-of-its-own"),  # the label differs from the name
    (LONG_NODE, "rngd-long"),  # a name no label value can hold
])
def test_a_run_pinned_to_a_node_runs_there_whatever_its_hostname_label(
        daemons, submit, store, admin, config, node, hostname):
    admin.add_node(node, cards=8, images=[IMAGE], hostname=hostname)
    try:
        config.k8s.node = node
        daemon = daemons.start()
        run_id = submit()
        job = _launched(daemon, store, run_id)
        pod = admin.running_pod(NS, job)
        assert pod["spec"]["nodeName"] == node
    finally:
        _remove_node(admin, node)


def _remove_node(admin, node: str) -> None:
    """The node and the pods on it: at once, as no kubelet is left to confirm their end."""
    for pod in admin.items(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"):
        meta = pod["metadata"]
        admin.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                      {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    admin.request("DELETE", f"/api/v1/nodes/{node}")


def test_a_trainer_pod_gets_no_service_account_token(daemons, submit, store, admin):
    daemon = daemons.start()
    job = _launched(daemon, store, submit())
    pod = admin.running_pod(NS, job)
    assert pod["spec"]["automountServiceAccountToken"] is False
    mounts = pod["spec"]["containers"][0].get("volumeMounts") or []
    assert not [m for m in mounts if m["mountPath"].startswith("/var/run/secrets/kubernetes.io")]
