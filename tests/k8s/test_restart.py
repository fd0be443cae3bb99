"""Adoption after a daemon restart, Jobs the store does not know, cancel, foreign holders."""

from __future__ import annotations

from k8s_support import device_holder, step_line, tick_until_launched


def _new_launcher(home, store, config, proc):
    from daemon.launchers.k8s.launcher import K8sLauncher
    from daemon.run.ingest import Ingest

    return K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store), proc=str(proc))


def test_a_restarted_daemon_adopts_the_running_job_and_ingests_on_without_duplicates(
        cluster, running, launcher, home, store, config, proc):
    run_id, job = running()
    pod = cluster.start_pod(job)
    cluster.log(pod, [("2026-01-01T00:00:02Z", step_line(1)),
                      ("2026-01-01T00:00:02.5Z", step_line(2))])
    launcher.follow(store.run(run_id))
    launcher.close()  # the daemon is killed

    cluster.log(pod, [("2026-01-01T00:00:02.9Z", step_line(3))])
    again = _new_launcher(home, store, config, proc)
    again.startup()
    assert again.recover(store.run(run_id)) is None
    assert again.follow(store.run(run_id)) is None
    assert [s["step"] for s in store.steps(run_id)] == [1, 2, 3]
    assert len((home.run_dir(run_id) / "trainer.log").read_text().splitlines()) == 3
    assert store.events(run_id=run_id, kinds=["adopt"])
    again.close()


def test_a_daemon_started_over_a_running_job_adopts_it_and_its_ticks_ingest_on(
        cluster, daemon, submit, home, store, config, proc):
    from daemon.scheduling.loop import Daemon

    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    job = store.run(run_id)["job_name"]
    pod = cluster.start_pod(job)
    cluster.log(pod, [("2026-01-01T00:00:02Z", step_line(1))])
    daemon.tick(now=now)
    daemon.launcher.close()  # the daemon is killed; the Job runs on
    cluster.log(pod, [("2026-01-01T00:00:03Z", step_line(2))])

    again = Daemon(home, store, config, _new_launcher(home, store, config, proc),
                   probe=daemon.probe)
    again.start()
    try:
        again.tick(now=now + 1)
    finally:
        again.close()
    assert [s["step"] for s in store.steps(run_id)] == [1, 2]
    assert store.run(run_id)["status"] == "running"
    assert cluster.names("batch/v1/jobs") == [job]  # the same Job, not a new one
    assert [e["message"] for e in store.events(run_id=run_id, kinds=["adopt"])] == [
        f"adopted Job ml/{job} after a restart"]


def test_a_run_whose_job_vanished_while_the_daemon_was_down_fails(cluster, running, launcher,
                                                                 store):
    run_id, job = running()
    cluster.kmock.objects["batch/v1/jobs", "ml", job].delete()
    outcome = launcher.recover(store.run(run_id))
    assert outcome.status == "failed" and "gone when the daemon restarted" in outcome.reason


def test_a_job_of_ours_the_store_does_not_know_is_reported_and_left_alone(cluster, running,
                                                                         launcher, store):
    run_id, job = running()
    store.finish_run(run_id, "failed", reason="lost track")  # as if another home launched it
    launcher.startup()
    [event] = store.events(kinds=["unknown_job"])
    assert f"Job ml/{job} (run {run_id}) is ours but not active" in event["message"]
    assert cluster.get("batch/v1/jobs", job) is not None


def test_cancel_deletes_the_job_and_the_run_ends_cancelled(cluster, running, launcher, store):
    run_id, job = running()
    pod = cluster.start_pod(job)
    store.request_cancel(run_id)
    launcher.cancel(store.run(run_id))
    assert cluster.get("batch/v1/jobs", job) is None
    assert cluster.get("v1/pods", pod) is None
    assert launcher.follow(store.run(run_id)).status == "cancelled"


def test_a_cancel_through_the_daemon_deletes_the_job_within_one_tick(cluster, daemon, submit,
                                                                   store):
    run_id = submit()
    now = tick_until_launched(daemon, store, run_id, 1)
    job = store.run(run_id)["job_name"]
    pod = cluster.start_pod(job)
    assert store.request_cancel(run_id) == "requested"
    assert daemon.tick(now=now).finished == (run_id, "cancelled")
    assert cluster.get("batch/v1/jobs", job) is None
    assert cluster.get("v1/pods", pod) is None
    assert store.run(run_id)["status"] == "cancelled"


def test_a_device_holder_outside_our_pod_deletes_the_job_and_requeues(cluster, running,
                                                                      launcher, store, proc):
    run_id, job = running()
    pod = cluster.start_pod(job)
    uid = cluster.get("v1/pods", pod)["metadata"]["uid"]
    device_holder(proc, 4242, f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-x\n")
    device_holder(proc, 999, "0::/user.slice/user-1000.slice/session-3.scope\n")
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "requeue" and outcome.reason.startswith(
        "a foreign process held the cards: pid 999")
    assert cluster.get("batch/v1/jobs", job) is None
    assert launcher.own_pids() == {4242}


def test_our_pods_own_device_holder_is_not_foreign(cluster, running, launcher, store, proc):
    run_id, job = running()
    pod = cluster.start_pod(job)
    uid = cluster.get("v1/pods", pod)["metadata"]["uid"]
    device_holder(proc, 4242, f"12:devices:/kubepods/besteffort/pod{uid}/abc\n")
    assert launcher.follow(store.run(run_id)) is None
    assert cluster.get("batch/v1/jobs", job) is not None
