"""Following a Job to its end: image-pull rescue, OOM, deadline, exit codes, logs."""

from __future__ import annotations

import pytest
from k8s_support import end_line, job_of, pulled_before, start_line, step_line, tick_until_launched

RUNNING = {"running": {"startedAt": "2026-01-01T00:00:01Z"}}
MISSING = "registry.example/furiosa-llm:typo"


def _waiting(reason: str, message: str, container: str = "trainer") -> dict:
    return {"phase": "Pending", "containerStatuses": [
        {"name": container, "state": {"waiting": {"reason": reason, "message": message}}}]}


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_an_image_pull_error_deletes_the_job_in_one_tick_pre_pulls_and_retries(
        cluster, daemon, submit, store, reason):
    run_id = submit()
    daemon.tick(now=1)
    assert daemon.tick(now=2).launched == run_id  # gates passed on 2 ticks in a row
    job = store.run(run_id)["job_name"]
    pod = cluster.start_pod(job, phase="Pending", state={"waiting": {
        "reason": reason, "message": "rpc error: manifest unknown"}})

    daemon.tick(now=3)
    assert cluster.get("batch/v1/jobs", job) is None
    assert cluster.get("v1/pods", pod) is None  # its cards are free now
    assert store.run(run_id)["status"] == "queued"
    messages = [e["message"] for e in store.events(run_id=run_id, kinds=["image_pull"])]
    assert messages and f"{reason}: rpc error: manifest unknown" in messages[0]
    [prepull] = cluster.names("v1/pods")  # the same tick's gate check started the pre-pull
    spec = cluster.get("v1/pods", prepull)["spec"]
    assert spec["nodeName"] == "rngd-node-1"
    assert "furiosa.ai/rngd" not in str(spec)  # it asks for no card

    cluster.patch("v1/pods", prepull, {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "prepull", "state": {"terminated": {"exitCode": 0}}}]}})
    daemon.tick(now=4)
    assert daemon.tick(now=5).launched == run_id
    run = store.run(run_id)
    assert run["attempts"] == 2 and run["job_name"] == job_of(store, run_id, 2)
    assert cluster.get("batch/v1/jobs", run["job_name"]) is not None
    # Retried because the node lists the image (it was pulled there before): an event.
    [retry] = store.events(run_id=run_id, kinds=["retry"])
    assert retry["data"] == {"class": "image_pull", "attempt": 2, "max_attempts": 3,
                             "reason": f"{reason}: rpc error: manifest unknown"}
    assert "is in the node's status.images" in retry["message"]


def test_an_invalid_image_name_fails_the_run_at_once_without_a_retry(cluster, daemon, submit,
                                                                     store):
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    job = store.run(run_id)["job_name"]
    cluster.start_pod(job, phase="Pending", state={"waiting": {
        "reason": "InvalidImageName", "message": "couldn't parse image name"}})

    assert daemon.tick(now=now).finished == (run_id, "failed")
    run = store.run(run_id)
    assert run["exit_reason"] == (
        "image registry.example/furiosa-llm:2026.1 could not be pulled: InvalidImageName: "
        "couldn't parse image name (not retried: InvalidImageName: the image name itself is "
        "refused)")
    assert store.events(run_id=run_id, kinds=["retry"]) == []
    assert cluster.names("batch/v1/jobs") == [] and cluster.names("v1/pods") == []


def test_a_pull_of_an_image_never_pulled_fails_at_the_first_pre_pull_and_the_queue_goes_on(
        cluster, daemon, submit, store, clock):
    stuck = submit(image=MISSING)
    behind = submit()
    daemon.tick(now=0)  # the gate check starts a pre-pull pod
    [pod] = cluster.names("v1/pods")
    cluster.patch("v1/pods", pod, {"status": _waiting(
        "ErrImagePull", "pull access denied, repository does not exist", "prepull")})
    assert daemon.tick(now=1).launched is None

    run = store.run(stuck)
    assert run["status"] == "failed"
    assert run["exit_reason"] == (
        f"image {MISSING} could not be pulled: ErrImagePull: pull access denied, repository "
        f"does not exist (not retried: {MISSING} was never pulled by rngdctl: a wrong name or "
        "tag, or no access, fails the same way again; fix it and `rngdctl restart` the run)")
    assert store.events(run_id=stuck, kinds=["retry"]) == []
    tick_until_launched(daemon, store, behind, 2)


def test_pull_failures_and_failed_pre_pulls_share_max_attempts_and_the_first_message_is_kept(
        cluster, daemon, submit, store, config, clock):
    config.k8s.max_attempts = 2
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    cluster.start_pod(store.run(run_id)["job_name"], phase="Pending", state={"waiting": {
        "reason": "ErrImagePull", "message": "manifest for furiosa-llm:2026.1 not found"}})
    daemon.tick(now=now)  # try 1: the Job is deleted, the pre-pull pod starts
    [prepull] = cluster.names("v1/pods")
    cluster.patch("v1/pods", prepull, {"status": _waiting(
        "ImagePullBackOff", "Back-off pulling image", "prepull")})

    assert daemon.tick(now=now + 1).launched is None  # try 2: the pre-pull failed
    run = store.run(run_id)
    assert run["status"] == "failed"
    assert run["exit_reason"] == ("image registry.example/furiosa-llm:2026.1 could not be "
                                  "pulled after 2 tries: ErrImagePull: manifest for "
                                  "furiosa-llm:2026.1 not found")
    assert cluster.names("v1/pods") == [] and cluster.names("batch/v1/jobs") == []


def test_a_pre_pull_that_keeps_failing_fails_the_queued_run_and_unblocks_the_queue(
        cluster, daemon, submit, store, config, clock):
    config.k8s.prepull_retry = 30
    # so each failed pull is worth a retry (daemon/launchers/retry.py)
    pulled_before(store, MISSING)
    stuck = submit(image=MISSING)
    behind = submit()
    messages = ["pull access denied, repository does not exist", "Back-off pulling image",
                "Back-off pulling image"]
    for i, message in enumerate(messages):
        daemon.tick(now=10 * i)  # the gate check starts a pre-pull pod
        [pod] = cluster.names("v1/pods")
        assert "furiosa.ai/rngd" not in str(cluster.get("v1/pods", pod)["spec"])
        cluster.patch("v1/pods", pod, {"status": _waiting(
            "ErrImagePull" if i == 0 else "ImagePullBackOff", message, "prepull")})
        assert daemon.tick(now=10 * i + 1).launched is None
        assert cluster.names("v1/pods") == []  # the failed pre-pull pod is deleted at once
        if i == 0:
            clock.now += 10
            daemon.tick(now=10 * i + 2)
            assert cluster.names("v1/pods") == []  # no new pod before prepull_retry
        clock.now += 30

    run = store.run(stuck)
    assert (run["status"], run["attempts"]) == ("failed", 0)  # no Job was ever launched
    assert run["exit_reason"] == (f"image {MISSING} could not be pulled after 3 tries: "
                                  "ErrImagePull: pull access denied, repository does not exist")
    assert [e["message"] for e in store.events(run_id=stuck, kinds=["finished"])] == [
        "failed: " + run["exit_reason"]]
    tick_until_launched(daemon, store, behind, 100)  # the next run is the head now and starts
    assert store.run(stuck)["status"] == "failed"


def test_a_pre_pull_pod_that_never_pulls_counts_as_a_failed_try(
        cluster, daemon, submit, store, config, clock):
    run_id = submit(image=MISSING)
    daemon.tick(now=1)
    [pod] = cluster.names("v1/pods")
    cluster.patch("v1/pods", pod, {"status": _waiting("ContainerCreating", "", "prepull")})
    clock.now += config.k8s.prepull_timeout
    daemon.tick(now=2)
    assert cluster.names("v1/pods") == []
    [event] = store.events(run_id=run_id, kinds=["prepull_failed"])
    assert event["message"] == f"{MISSING}: not pulled within 900 s (ContainerCreating)"
    assert store.run(run_id)["status"] == "queued"  # 1 try of 3


def test_oomkilled_ends_the_run_as_oom(cluster, running, launcher, store):
    run_id, job = running()
    cluster.start_pod(job, phase="Failed", state={"terminated": {
        "reason": "OOMKilled", "exitCode": 137}})
    outcome = launcher.follow(store.run(run_id))
    assert (outcome.status, outcome.exit_code) == ("oom", 137)


def test_a_job_past_its_deadline_ends_the_run_as_timeout(cluster, running, launcher, store):
    run_id, job = running(deadline=60)
    cluster.start_pod(job)
    assert launcher.follow(store.run(run_id)) is None
    # The Job controller kills the pod and marks the Job failed.
    for pod in cluster.names("v1/pods"):
        cluster.kmock.objects["v1/pods", "ml", pod].delete()
    cluster.finish_job(job, "Failed", "DeadlineExceeded")
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "timeout" and "60 s deadline" in outcome.reason


def test_a_non_zero_exit_fails_the_run_with_the_logs_tail(cluster, running, launcher, store):
    run_id, job = running()
    pod = cluster.start_pod(job, phase="Failed", state={"terminated": {
        "reason": "Error", "exitCode": 1}})
    cluster.log(pod, [("2026-01-01T00:00:02Z", start_line(run_id)),
                      ("2026-01-01T00:00:03Z", "Traceback (most recent call last):"),
                      ("2026-01-01T00:00:03Z", "RuntimeError: rngd0: device lost"),
                      ("2026-01-01T00:00:04Z", end_line("error", "device lost"))])
    outcome = launcher.follow(store.run(run_id))
    assert (outcome.status, outcome.exit_code) == ("failed", 1)
    assert "trainer: error: device lost" in outcome.reason
    assert outcome.reason.endswith("RuntimeError: rngd0: device lost")


PUT_OUT = {
    "evicted": {"phase": "Failed", "state": {"terminated": {"exitCode": 137}},
                "reason": "Evicted", "message": "The node was low on resource: memory."},
    "node lost": {"phase": "Unknown", "state": RUNNING, "reason": "NodeLost",
                  "message": "Node rngd-node-1 which was running pod is unresponsive"},
}


@pytest.mark.parametrize("how", PUT_OUT)
def test_a_pod_put_out_requeues_the_run_when_the_config_says_so(cluster, running, launcher,
                                                                store, how):
    run_id, job = running()
    pod = cluster.start_pod(job)
    cluster.set_pod(pod, **PUT_OUT[how])
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "requeue" and PUT_OUT[how]["reason"] in outcome.reason
    assert cluster.get("batch/v1/jobs", job) is None


@pytest.mark.parametrize("how", PUT_OUT)
def test_a_pod_put_out_fails_the_run_with_the_reason_when_requeue_is_off(
        cluster, running, launcher, store, config, how):
    config.k8s.requeue_on_eviction = False
    run_id, job = running()
    pod = cluster.start_pod(job)
    cluster.set_pod(pod, **PUT_OUT[how])
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "failed" and PUT_OUT[how]["message"] in outcome.reason


def test_a_finished_run_has_every_step_its_log_digest_node_and_versions(
        cluster, running, launcher, store, home):
    run_id, job = running()
    pod = cluster.start_pod(job)
    cluster.log(pod, [("2026-01-01T00:00:02.5Z", start_line(run_id)),
                      ("2026-01-01T00:00:03.1Z", "compiling graphs"),
                      ("2026-01-01T00:00:03.2Z", step_line(1))])
    assert launcher.follow(store.run(run_id)) is None
    cluster.log(pod, [("2026-01-01T00:00:04Z", step_line(2)),
                      ("2026-01-01T00:00:05Z", end_line())])
    cluster.set_pod(pod, phase="Succeeded", state={"terminated": {"exitCode": 0,
                                                                  "reason": "Completed"}})
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "done"
    run = store.run(run_id)
    assert [s["step"] for s in store.steps(run_id)] == [1, 2]
    assert run["image_digest"].startswith("registry.example/furiosa-llm@sha256:")
    assert run["node"] == "rngd-node-1"
    assert run["versions"] == {"torch": "2.13.0"}
    saved = (home.run_dir(run_id) / "trainer.log").read_text().splitlines()
    assert saved[1] == "compiling graphs" and len(saved) == 5


def test_a_dropped_log_stream_resumes_with_since_time_without_duplicates(
        cluster, running, launcher, store, home):
    run_id, job = running()
    pod = cluster.start_pod(job)
    # Two lines in the same second, then the read fails (a dropped stream).
    cluster.log(pod, [("2026-01-01T00:00:07.100Z", step_line(1)),
                      ("2026-01-01T00:00:07.2Z", step_line(2))])
    assert launcher.follow(store.run(run_id)) is None
    cluster.fail("get", f"/api/v1/namespaces/ml/pods/{pod}/log", times=3)
    cluster.log(pod, [("2026-01-01T00:00:07.300Z", step_line(3))])
    assert launcher.follow(store.run(run_id)) is None  # retries ran out: nothing read
    cluster.log(pod, [("2026-01-01T00:00:08Z", step_line(4))])
    assert launcher.follow(store.run(run_id)) is None

    assert cluster.kmock.log_requests[-1]["sinceTime"] == "2026-01-01T00:00:07Z"
    assert [s["step"] for s in store.steps(run_id)] == [1, 2, 3, 4]
    saved = (home.run_dir(run_id) / "trainer.log").read_text().splitlines()
    assert len(saved) == 4  # the second 00:00:07 was read twice, stored once
    assert store.events(run_id=run_id, kinds=["k8s_unavailable"])


def test_a_crashed_trainers_last_line_without_a_newline_is_still_saved(cluster, running,
                                                                      launcher, store, home):
    from k8s_emulator import NO_NEWLINE

    run_id, job = running()
    pod = cluster.start_pod(job)
    cluster.log(pod, [("2026-01-01T00:00:02Z", "Fatal Python error: Segmentation fault"
                       + NO_NEWLINE)])
    assert launcher.follow(store.run(run_id)) is None  # running: the line may go on
    assert not (home.run_dir(run_id) / "trainer.log").exists()
    cluster.set_pod(pod, phase="Failed", state={"terminated": {"exitCode": 139,
                                                               "reason": "Error"}})
    outcome = launcher.follow(store.run(run_id))
    assert outcome.reason.endswith("--- log tail ---\nFatal Python error: Segmentation fault")
    assert (home.run_dir(run_id) / "trainer.log").read_text() == \
        "Fatal Python error: Segmentation fault\n"


def test_a_partial_last_line_waits_for_its_newline():
    from daemon.launchers.k8s.logs import LogCursor

    cursor = LogCursor()
    assert cursor.take("2026-01-01T00:00:01Z a\n2026-01-01T00:00:02Z b-partial") == ["a"]
    assert cursor.take("2026-01-01T00:00:01Z a\n2026-01-01T00:00:02Z b-whole\n") == ["b-whole"]


def _oom(cluster, job):
    cluster.start_pod(job, phase="Failed", state={"terminated": {"reason": "OOMKilled",
                                                                 "exitCode": 137}})


def _deadline(cluster, job):
    cluster.finish_job(job, "Failed", "DeadlineExceeded")  # the controller removed the pod


@pytest.mark.parametrize(("end", "status"), [(_oom, "oom"), (_deadline, "timeout")])
def test_the_daemon_stores_oom_and_timeout_as_the_runs_status(cluster, daemon, submit, store,
                                                              end, status):
    run_id = submit(deadline=60)
    now = tick_until_launched(daemon, store, run_id, 1)
    end(cluster, store.run(run_id)["job_name"])
    assert daemon.tick(now=now).finished == (run_id, status)
    assert store.run(run_id)["status"] == status


def test_a_log_written_faster_than_a_tick_reads_is_read_in_bounded_parts_each_line_once(
        cluster, running, launcher, store, home):
    from daemon.launchers.k8s.following import LOG_READ_BYTES

    run_id, job = running()
    pod = cluster.start_pod(job)
    # 20,000 lines a second for two seconds, then a burst second larger than one read.
    second = 20_000
    stamped = [(f"2026-01-01T00:00:{2 + n // second:02d}.{n % second:06d}Z", step_line(n + 1))
               for n in range(2 * second)]
    stamped += [(f"2026-01-01T00:00:04.{n:06d}Z", step_line(2 * second + n + 1))
                for n in range(2 * second)]
    cluster.log(pod, [("2026-01-01T00:00:01Z", start_line(run_id)), *stamped,
                      ("2026-01-01T00:00:05Z", end_line())])
    cluster.set_pod(pod, phase="Succeeded", state={"terminated": {"exitCode": 0,
                                                                  "reason": "Completed"}})
    follows, outcome = 0, None
    while outcome is None:
        follows += 1
        assert follows < 50
        outcome = launcher.follow(store.run(run_id))
        if follows == 1:  # one tick read only its part, and acted
            assert 0 < store.step_counts(run_id)["main"] < len(stamped)

    assert outcome.status == "done" and follows > 2
    reads = [r for r in cluster.kmock.log_requests if r.get("limitBytes")]
    assert len(reads) == len(cluster.kmock.log_requests)
    assert int(reads[0]["limitBytes"]) == LOG_READ_BYTES
    assert [s["step"] for s in store.steps(run_id)] == list(range(1, len(stamped) + 1))
    saved = (home.run_dir(run_id) / "trainer.log").read_text().splitlines()
    assert len(saved) == len(stamped) + 2
