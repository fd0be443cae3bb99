"""API failures: retried with backoff, logged as events, never raised into the daemon."""

from __future__ import annotations

import time

import pytest
from k8s_emulator import NODE
from k8s_support import job_of

from daemon.errors import LaunchError

NODE_PATH = f"/api/v1/nodes/{NODE}"


def test_api_500s_are_retried_and_logged_as_an_event(cluster, launcher, submit, store):
    run = store.run(submit())
    cluster.fail("get", NODE_PATH, times=2)
    reading = launcher.cluster_reading(run)
    assert reading.cards_free == 8
    assert launcher.client.calls["read_node"] == 3
    [event] = store.events(kinds=["k8s_retry"])
    assert event["message"] == "read_node answered after 2 retries (last: 500 Internal " \
                               "Server Error)"


def test_a_request_that_times_out_is_retried(cluster, launcher, submit, store):
    run = store.run(submit())
    cluster.hang("get", NODE_PATH, times=1, seconds=2.0)
    started = time.monotonic()
    reading = launcher.cluster_reading(run)
    assert reading.cards_free == 8
    assert time.monotonic() - started < 1.5  # the 0.5 s timeout cut the hung request
    assert "ReadTimeoutError" in store.events(kinds=["k8s_retry"])[0]["message"]


def test_an_api_that_stays_down_blocks_the_gate_with_a_clear_reading(cluster, launcher, submit,
                                                                    store):
    run = store.run(submit())
    cluster.fail("get", NODE_PATH, times=6, payload=503)
    reading = launcher.cluster_reading(run)
    assert reading.cards_free == 0
    assert reading.cards_detail.startswith("Kubernetes API unavailable: read_node: no answer "
                                           "after 3 attempts (503")
    launcher.cluster_reading(run)
    assert len(store.events(kinds=["k8s_unavailable"])) == 1  # one event per outage


def test_a_running_job_survives_an_api_outage(cluster, running, launcher, store):
    run_id, job = running()
    cluster.start_pod(job)
    cluster.fail("get", f"/apis/batch/v1/namespaces/ml/jobs/{job}", times=3, payload=502)
    assert launcher.follow(store.run(run_id)) is None
    assert launcher.follow(store.run(run_id)) is None
    kinds = [e["kind"] for e in store.events(run_id=run_id)]
    assert kinds[-2:] == ["k8s_unavailable", "k8s_available"]
    assert store.run(run_id)["status"] == "running"


def test_a_forbidden_create_ends_that_attempt_with_a_launch_error(cluster, launcher, submit,
                                                                  store):
    run_id = submit()
    store.claim_for_launch(run_id, launcher="k8s")
    cluster.fail("post", "/apis/batch/v1/namespaces/ml/jobs", times=1, payload=403)
    with pytest.raises(LaunchError, match=rf"cannot create Job ml/{job_of(store, run_id, 1)}: "
                                          r"create_job: 403"):
        launcher.launch(store.run(run_id))
    assert launcher.client.calls["create_job"] == 1  # a 4xx is not retried


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_throttling_and_gateway_errors_are_retried_like_500s(cluster, launcher, submit, store,
                                                            status):
    cluster.fail("get", NODE_PATH, times=1, payload=status)
    assert launcher.cluster_reading(store.run(submit())).cards_free == 8
    [event] = store.events(kinds=["k8s_retry"])
    assert event["message"].startswith(f"read_node answered after 1 retry (last: {status} ")


def test_a_429_waits_as_long_as_the_servers_retry_after(cluster):
    import kmock

    from daemon.launchers.k8s.client import K8sClient, connect

    api, _ = connect()
    slept = []
    client = K8sClient(api, timeout=0.5, retries=2, backoff=0.01, sleep=slept.append)
    cluster.fail("get", NODE_PATH, times=1,
                 payload=kmock.Response(status=429, headers={"Retry-After": "3"}))
    assert client.read_node(NODE)["metadata"]["name"] == NODE
    assert slept == [3.0]
    client.close()


def test_a_refused_connection_is_retried_and_blocks_the_gate_without_raising(
        cluster, launcher, submit, store, dead_api):
    reading = launcher.cluster_reading(store.run(submit()))
    assert reading.cards_free == 0
    assert "no answer after 3 attempts" in reading.cards_detail
    assert "Connection refused" in reading.cards_detail or "NewConnectionError" in \
        reading.cards_detail
    assert launcher.client.calls["read_node"] == 3
    [event] = store.events(kinds=["k8s_unavailable"])
    assert event["message"].endswith("retrying next tick")


def test_a_4xx_while_following_fails_the_run_with_a_clear_event(cluster, running, launcher,
                                                                store):
    run_id, job = running()
    cluster.fail("get", f"/apis/batch/v1/namespaces/ml/jobs/{job}", times=1, payload=403)
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "failed"
    assert outcome.reason.startswith("the Kubernetes API refused a request: read_job: 403")
    [event] = store.events(run_id=run_id, kinds=["k8s_error"])
    assert event["message"].startswith("read_job: 403")
    assert launcher.client.calls["read_job"] == 1  # not retried


def test_a_2xx_answer_that_is_not_a_json_object_is_retried_not_raised(cluster, launcher, submit,
                                                                      store):
    import kmock

    cluster.fail("get", NODE_PATH, times=1, payload=kmock.text("<html>proxy login</html>"))
    assert launcher.cluster_reading(store.run(submit())).cards_free == 8
    [event] = store.events(kinds=["k8s_retry"])
    assert "200 with a body that is not a JSON object" in event["message"]
    assert "proxy login" in event["message"]
