"""The card resource read from the node (rngd, rngd-s, rngd-max) or set in config, and the
Job pod's seccomp profile."""

from __future__ import annotations

import pytest
from k8s_emulator import NODE
from k8s_support import IMAGE

from daemon.errors import LaunchError


def rngd_max_node(cluster, cards: int = 4) -> None:
    cluster.put("v1/nodes", {
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        "status": {"allocatable": {"cpu": "64", "furiosa.ai/rngd-max": str(cards)},
                   "images": [{"names": [IMAGE], "sizeBytes": 1}]},
    }, namespace=None)


def test_a_node_with_rngd_max_cards_is_counted_and_asked_in_that_resource(cluster, launcher,
                                                                          running, submit,
                                                                          store):
    rngd_max_node(cluster)
    cluster.put("v1/pods", {
        "metadata": {"name": "serving", "namespace": "other"},
        "spec": {"nodeName": NODE, "containers": [{
            "name": "c", "resources": {"limits": {"furiosa.ai/rngd-max": "1"}}}]},
        "status": {"phase": "Running"}}, namespace="other")
    reading = launcher.cluster_reading(store.run(submit()))
    assert reading.cards_free == 3
    assert "4 allocatable, 1 requested furiosa.ai/rngd-max" in reading.cards_detail
    run_id, name = running(cards=2)
    resources = cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"][
        "containers"][0]["resources"]
    assert resources["limits"] == {"furiosa.ai/rngd-max": "2"}
    assert resources["requests"] == {"furiosa.ai/rngd-max": "2"}
    [event] = store.events(run_id=run_id, kinds=["launch"])
    assert event["data"]["cards"] == 2


def test_the_card_resource_set_in_config_wins_over_the_nodes(cluster, launcher, config,
                                                             running, submit, store):
    rngd_max_node(cluster)
    config.k8s.card_resource = "furiosa.ai/rngd-s"
    reading = launcher.cluster_reading(store.run(submit()))
    assert reading.cards_free == 0
    assert "no allocatable furiosa.ai/rngd-s" in reading.cards_detail
    config.k8s.card_resource = "furiosa.ai/rngd-max"
    _, name = running(cards=1)
    limits = cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]
    assert limits == {"furiosa.ai/rngd-max": "1"}


def test_a_node_without_card_resources_points_at_the_dra_driver(cluster, launcher, submit,
                                                                 store):
    cluster.put("v1/nodes", {"metadata": {"name": NODE}, "status": {"allocatable": {}}},
                namespace=None)
    detail = launcher.cluster_reading(store.run(submit())).cards_detail
    assert "furiosa.ai/rngd, furiosa.ai/rngd-s, furiosa.ai/rngd-max" in detail
    assert "DRA driver" in detail and "npu.furiosa.ai ResourceSlices" in detail


def test_the_job_pod_runs_seccomp_unconfined_by_default(cluster, running):
    _, name = running()
    pod = cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "Unconfined"}}


@pytest.mark.parametrize("profile, expected", [
    ("RuntimeDefault", {"seccompProfile": {"type": "RuntimeDefault"}}), ("", None)])
def test_the_seccomp_profile_comes_from_the_config(cluster, running, config, profile,
                                                   expected):
    config.k8s.seccomp_profile = profile
    _, name = running()
    assert cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"].get(
        "securityContext") == expected


def test_an_unknown_seccomp_profile_is_a_config_error_naming_the_choices(cluster, launcher,
                                                                         config, submit, store):
    config.k8s.seccomp_profile = "Localhost"
    run_id = submit()
    assert store.claim_for_launch(run_id, launcher="k8s")
    with pytest.raises(LaunchError, match="seccomp_profile must be one of 'Unconfined'"):
        launcher.launch(store.run(run_id))
    assert cluster.names("batch/v1/jobs") == []
