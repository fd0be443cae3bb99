"""Cards free and image present, read from seeded nodes and pods."""

from __future__ import annotations

from k8s_emulator import NODE
from k8s_support import job_of


def test_cards_free_subtracts_every_namespaces_live_pods_on_the_node(cluster, launcher, submit,
                                                                    store):
    cluster.add_pod("serving", cards=3, namespace="inference")
    cluster.add_pod("notebook", cards=1, namespace="alice")
    cluster.add_pod("finished", cards=4, namespace="bob", phase="Succeeded")
    cluster.add_pod("elsewhere", cards=4, namespace="bob", node="other-node")
    reading = launcher.cluster_reading(store.run(submit()))
    assert reading.cards_free == 4
    assert "8 allocatable, 4 requested" in reading.cards_detail
    assert "inference/serving=3" in reading.cards_detail


def test_a_node_without_the_device_plugin_has_no_cards_free(cluster, launcher, submit, store):
    cluster.put("v1/nodes", {"metadata": {"name": NODE}, "status": {"allocatable": {}}},
                namespace=None)
    reading = launcher.cluster_reading(store.run(submit()))
    assert reading.cards_free == 0
    assert "no allocatable furiosa.ai/rngd" in reading.cards_detail


def test_the_image_on_the_node_passes_the_image_gate(cluster, launcher, submit, store):
    reading = launcher.cluster_reading(store.run(submit()))
    assert reading.image_present is True


def test_an_image_missing_from_the_node_is_pre_pulled_by_a_pod_without_cards(
        cluster, launcher, submit, store):
    launcher.startup()
    run = store.run(submit(image="registry.example/other:1"))
    first = launcher.cluster_reading(run)
    assert first.image_present is False and "pre-pulling with pod" in first.image_detail
    [pod_name] = cluster.names("v1/pods")
    pod = cluster.get("v1/pods", pod_name)
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["containers"][0]["image"] == "registry.example/other:1"
    assert "furiosa.ai/rngd" not in str(pod["spec"])

    cluster.patch("v1/pods", pod_name, {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "prepull", "state": {"terminated": {"exitCode": 0}}}]}})
    second = launcher.cluster_reading(run)
    assert second.image_present is True
    assert cluster.names("v1/pods") == []  # the pre-pull pod is cleaned up


def test_the_gates_command_reads_but_never_starts_a_pre_pull(cluster, launcher, submit, store):
    reading = launcher.cluster_reading(store.run(submit(image="registry.example/other:1")))
    assert reading.image_present is False
    assert cluster.names("v1/pods") == []


def test_an_unpullable_image_fails_the_image_gate_with_the_kubelet_message(
        cluster, launcher, submit, store):
    launcher.startup()
    run = store.run(submit(image="registry.example/typo:1"))
    launcher.cluster_reading(run)
    [pod_name] = cluster.names("v1/pods")
    cluster.patch("v1/pods", pod_name, {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "prepull", "state": {"waiting": {
            "reason": "InvalidImageName", "message": "couldn't parse image name"}}}]}})
    reading = launcher.cluster_reading(run)
    assert reading.image_present is False
    assert "InvalidImageName: couldn't parse image name" in reading.image_detail
    # A name the kubelet cannot parse is never retried (daemon/launchers/retry.py): the run
    # fails now.
    assert [e["kind"] for e in store.events(run_id=run["id"])][-2:] == ["prepull_failed",
                                                                       "finished"]
    assert store.run(run["id"])["status"] == "failed"


def test_gate_checks_store_the_cluster_readings_beside_the_host_gates(cluster, launcher, submit,
                                                                     home, store, config):
    from daemon.probes.host_reading import HostReading
    from daemon.scheduling.loop import Daemon

    cluster.add_pod("serving", cards=7, namespace="inference")
    run_id = submit(cards=2)
    idle = HostReading(time=0, load=(1.0, 1.0, 1.0), holders=(), complete=True)
    Daemon(home, store, config, launcher, probe=lambda: idle).tick(now=100.0)
    [check] = store.gate_checks(run_id=run_id)
    gates = {g["name"]: g for g in check["gates"]}
    assert gates["cards_free"]["reading"] == 1 and gates["cards_free"]["verdict"] == "fail"
    assert gates["image_present"]["verdict"] == "pass"
    assert gates["host_load"]["verdict"] == "pass"


def test_the_k8s_launcher_raises_race_safety_to_two_ticks_with_an_event(launcher, store,
                                                                        config):
    config.gates.consecutive = 1
    launcher.startup()
    assert config.gates.consecutive == 2
    [event] = store.events(kinds=["k8s"])
    assert event["message"].startswith("gates.consecutive raised to 2")


def test_a_run_launches_only_after_the_gates_pass_on_two_ticks_in_a_row(cluster, daemon, submit,
                                                                       store):
    run_id = submit(cards=2)
    assert daemon.tick(now=1).launched is None
    cluster.add_pod("grabbed", cards=7, namespace="inference")  # someone takes the cards
    assert daemon.tick(now=2).launched is None
    cluster.kmock.objects["v1/pods", "inference", "grabbed"].delete()
    assert daemon.tick(now=3).launched is None  # passes again: one in a row, not two
    assert daemon.tick(now=4).launched == run_id
    assert [c["passed"] for c in store.gate_checks(run_id=run_id)] == [1, 0, 1, 1]
    assert cluster.names("batch/v1/jobs") == [job_of(store, run_id, 1)]


def _new_launcher(home, store, config, proc):
    from daemon.launchers.k8s.launcher import K8sLauncher
    from daemon.run.ingest import Ingest

    return K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                       proc=str(proc))


def _pulled(cluster, pod_name):
    cluster.patch("v1/pods", pod_name, {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "prepull", "state": {"terminated": {"exitCode": 0}}}]}})


def test_a_pre_pull_pod_still_pulling_when_the_daemon_restarts_is_watched_not_made_twice(
        cluster, launcher, submit, store, home, config, proc):
    launcher.startup()
    run = store.run(submit(image="registry.example/other:1"))
    launcher.cluster_reading(run)
    launcher.close()  # the daemon stops while the pre-pull pod pulls
    [pod_name] = cluster.names("v1/pods")

    again = _new_launcher(home, store, config, proc)
    again.startup()
    assert cluster.names("v1/pods") == [pod_name]
    _pulled(cluster, pod_name)
    reading = again.cluster_reading(run)
    again.close()
    assert reading.image_present is True
    assert again.client.calls["create_pod"] == 0
    assert cluster.names("v1/pods") == []


def test_a_finished_pre_pull_pod_left_by_a_previous_daemon_is_deleted_at_startup(
        cluster, launcher, submit, store, home, config, proc):
    launcher.startup()
    run = store.run(submit(image="registry.example/other:1"))
    launcher.cluster_reading(run)
    launcher.close()
    [pod_name] = cluster.names("v1/pods")
    _pulled(cluster, pod_name)

    again = _new_launcher(home, store, config, proc)
    again.startup()
    assert cluster.names("v1/pods") == []
    assert again.cluster_reading(run).image_present is True  # it had pulled the image
    again.close()


def test_the_pre_pull_of_a_run_cancelled_while_queued_is_deleted_at_the_next_gate_check(
        cluster, launcher, submit, store):
    launcher.startup()
    cancelled = store.run(submit(image="registry.example/other:1"))
    launcher.cluster_reading(cancelled)
    assert len(cluster.names("v1/pods")) == 1
    store.request_cancel(cancelled["id"])
    reading = launcher.cluster_reading(store.run(submit()))  # the next head: image on the node
    assert reading.image_present is True
    assert cluster.names("v1/pods") == []
