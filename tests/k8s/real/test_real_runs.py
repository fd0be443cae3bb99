"""Runs on a real control plane: the daemon (as the rngdctl ServiceAccount) launches a Job, the
real scheduler binds its pod, kwok runs it and serves its log, the Job controller judges it."""

from __future__ import annotations

from admin import wait_for
from conftest import NS, tick_until
from k8s_support import end_line, start_line, step_line

CONTAINER = "trainer"


def _launched(daemon, store, admin, run_id: int) -> tuple[str, str]:
    """Tick until the run's Job is created and its pod runs: (Job, pod)."""
    tick_until(daemon, lambda: store.run(run_id)["status"] == "running", f"run {run_id} launched")
    job = store.run(run_id)["job_name"]
    return job, admin.running_pod(NS, job)["metadata"]["name"]


def _steps(store, run_id: int) -> list[int]:
    return [s["step"] for s in store.steps(run_id)]


def _job(admin, name: str) -> dict | None:
    return admin.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")


def _job_complete(admin, name: str) -> bool:
    conditions = ((_job(admin, name) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def test_a_run_goes_through_to_done_and_the_job_controller_agrees(daemons, submit, store,
                                                                   admin):
    daemon = daemons.start()
    run_id = submit(steps=3)
    job, pod = _launched(daemon, store, admin, run_id)
    admin.write_log(NS, pod, CONTAINER, [start_line(run_id), *map(step_line, (1, 2, 3)),
                                         end_line()])
    admin.exit_pod(NS, pod, 0)
    tick_until(daemon, lambda: store.run(run_id)["status"] != "running", f"run {run_id} ended")
    assert store.run(run_id)["status"] == "done", (store.run(run_id), store.events(run_id=run_id))
    assert _steps(store, run_id) == [1, 2, 3]
    wait_for(lambda: _job_complete(admin, job), f"Job {job} Complete")


def test_a_cancel_deletes_the_job_and_its_pod(daemons, submit, store, admin):
    daemon = daemons.start()
    run_id = submit()
    job, pod = _launched(daemon, store, admin, run_id)
    store.request_cancel(run_id)
    tick_until(daemon, lambda: store.run(run_id)["status"] != "running",
               f"run {run_id} cancelled")
    assert store.run(run_id)["status"] == "cancelled"
    wait_for(lambda: _job(admin, job) is None
             and admin.get(f"/api/v1/namespaces/{NS}/pods/{pod}") is None,
             f"Job {job} and pod {pod} gone (the garbage collector, kwok)")


def test_a_restarted_daemon_adopts_the_running_job_and_follows_it_to_done(daemons, submit,
                                                                           store, admin):
    first = daemons.start()
    run_id = submit(steps=2)
    job, pod = _launched(first, store, admin, run_id)
    admin.write_log(NS, pod, CONTAINER, [start_line(run_id), step_line(1)])
    tick_until(first, lambda: _steps(store, run_id) == [1], "step 1 ingested")
    daemons.stop(first)  # the Job runs on without a daemon

    admin.write_log(NS, pod, CONTAINER, [step_line(2), end_line()])
    second = daemons.start()
    assert [e["message"] for e in store.events(run_id=run_id, kinds=["adopt"])] == [
        f"adopted Job {NS}/{job} after a restart"]
    tick_until(second, lambda: _steps(store, run_id) == [1, 2], "step 2 ingested")
    admin.exit_pod(NS, pod, 0)
    tick_until(second, lambda: store.run(run_id)["status"] != "running", f"run {run_id} ended")
    assert store.run(run_id)["status"] == "done"
    jobs = admin.items(f"/apis/batch/v1/namespaces/{NS}/jobs")
    assert [j["metadata"]["name"] for j in jobs] == [job]  # the same Job, not a second


def test_a_job_past_its_deadline_ends_the_run_as_a_timeout(daemons, submit, store, admin):
    daemon = daemons.start()
    run_id = submit(deadline=3)  # activeDeadlineSeconds: the Job controller stops it
    _, pod = _launched(daemon, store, admin, run_id)
    admin.write_log(NS, pod, CONTAINER, [start_line(run_id), step_line(1)])
    tick_until(daemon, lambda: store.run(run_id)["status"] != "running",
               f"run {run_id} stopped by its deadline")
    run = store.run(run_id)
    assert run["status"] == "timeout", run
    assert "DeadlineExceeded: the Job ran past its 3 s deadline" in run["exit_reason"]
