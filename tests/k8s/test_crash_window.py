"""Never two Jobs for a run, whatever instant the daemon dies between creating one and
storing its name (RNGDCTL_FAULT, a real daemon subprocess against the emulator)."""

from __future__ import annotations

import pytest
from k8s_emulator import NODE
from k8s_support import IMAGE, end_line, job_of, start_line, step_line

from daemon import faults


def _daemon(rngdctl, cluster, fault=None):
    env = {"KUBECONFIG": str(cluster.kubeconfig), faults.ENV: fault or ""}
    return rngdctl("daemon", "--launcher", "k8s", "--namespace", "ml", "--context", "emu",
                   "--tick", "0.1", "--exit-when-idle", env=env, timeout=60)


@pytest.mark.parametrize("point", ["after_claim", "after_spawn", "after_record"])
def test_a_daemon_killed_around_the_job_creation_leaves_one_job_and_every_step_once(
        point, cluster, home, store, rngdctl, submit):
    run_id = submit(steps=3)
    cluster.kmock.autopilot = [start_line(run_id), step_line(1), step_line(2), step_line(3),
                               end_line()]
    home.config_path.write_text(f'[k8s]\nnode = "{NODE}"\nimage = "{IMAGE}"\n')
    code, _, err = _daemon(rngdctl, cluster, fault=point)
    assert code == -9, err
    killed = store.run(run_id)
    expected_jobs = [] if point == "after_claim" else [job_of(store, run_id, 1)]
    assert cluster.names("batch/v1/jobs") == expected_jobs
    assert killed["status"] == ("running" if point == "after_record" else "launching")
    assert killed["job_name"] == (job_of(store, run_id, 1) if point == "after_record" else None)

    code, _, err = _daemon(rngdctl, cluster)
    assert code == 0, err
    run = store.run(run_id)
    assert run["status"] == "done", store.events(run_id=run_id)
    assert [s["step"] for s in store.steps(run_id)] == [1, 2, 3]
    # after_claim: requeued and launched as attempt 2; otherwise the same Job, adopted
    attempt = 2 if point == "after_claim" else 1
    assert cluster.names("batch/v1/jobs") == [job_of(store, run_id, attempt)]


def test_a_restart_after_a_claim_does_not_adopt_the_job_of_an_earlier_attempt(
        cluster, launcher, store, running):
    run_id, old_job = running()
    # Attempt 1's Job outlived its requeue (its delete failed); attempt 2 was claimed
    # and the daemon died before it created its Job.
    store.requeue(run_id)
    assert store.claim_for_launch(run_id, launcher="k8s")
    outcome = launcher.recover(store.run(run_id))
    assert outcome is not None and outcome.status == "requeue", outcome
    assert store.run(run_id)["job_name"] is None
    assert cluster.names("batch/v1/jobs") == [old_job]
