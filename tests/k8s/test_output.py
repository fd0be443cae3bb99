"""A run's output on Kubernetes: the output volume in the Job, the stop grace, resume."""

from __future__ import annotations

from k8s_support import end_line, start_line, step_line

from trainer import records


def _pod(cluster, name):
    return cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"]


def test_the_job_mounts_the_output_volume_and_the_trainer_writes_its_run_there(
        cluster, running, config):
    config.k8s.output_volume, config.k8s.output_path = "rngdctl-output", "/out"
    run_id, name = running(checkpoint_every=50)
    pod = _pod(cluster, name)
    assert {"name": "rngdctl-output",
            "persistentVolumeClaim": {"claimName": "rngdctl-output"}} in pod["volumes"]
    assert {"name": "rngdctl-output", "mountPath": "/out", "readOnly": False} in \
        pod["containers"][0]["volumeMounts"]
    argv = pod["containers"][0]["command"]
    assert argv[argv.index("--out") + 1] == f"/out/runs/{run_id}/model"
    assert argv[argv.index("--checkpoint-every") + 1] == "50"


def test_without_an_output_volume_the_trainer_gets_no_out(cluster, running):
    _, name = running()
    assert "--out" not in _pod(cluster, name)["containers"][0]["command"]


def test_the_pod_has_the_stop_grace_to_finish_its_step_and_checkpoint(cluster, running, config):
    config.daemon.stop_grace_s = 300
    _, name = running()
    assert _pod(cluster, name)["terminationGracePeriodSeconds"] == 300


def test_a_trainer_preempted_by_a_sigterm_not_ours_requeues_to_go_on(cluster, running,
                                                                      launcher, store):
    run_id, job = running()
    pod = cluster.start_pod(job, phase="Failed", state={"terminated": {
        "reason": "Error", "exitCode": 143}})
    preempted = records.dumps(records.End(status="preempted", error="stopped by SIGTERM",
                                          data={"checkpoint": "/out/checkpoints/step-2"},
                                          time=2000.0))
    cluster.log(pod, [("2026-01-01T00:00:02Z", start_line(run_id)),
                      ("2026-01-01T00:00:03Z", step_line(1)),
                      ("2026-01-01T00:00:04Z", step_line(2)),
                      ("2026-01-01T00:00:05Z", preempted)])
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "requeue"
    assert "checkpoint /out/checkpoints/step-2 kept" in outcome.reason
    assert outcome.retry["data"]["class"] == "preempted"


def test_a_preempted_trainer_without_a_checkpoint_fails_with_the_reason(cluster, running,
                                                                        launcher, store):
    run_id, job = running()
    pod = cluster.start_pod(job, phase="Failed", state={"terminated": {
        "reason": "Error", "exitCode": 143}})
    cluster.log(pod, [("2026-01-01T00:00:02Z", start_line(run_id)),
                      ("2026-01-01T00:00:05Z", end_line("preempted", "stopped by SIGTERM"))])
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "failed" and "SIGTERM" in outcome.reason


def _doctor(config, proc):
    from daemon.launchers.k8s.doctor import run_checks

    return {c.name: c for c in run_checks(config, proc=str(proc))}["output volume"]


def test_doctor_says_when_no_output_volume_is_set_and_how_to_make_one(cluster, config, proc):
    check = _doctor(config, proc)
    assert not check.ok and "keeps no model and no checkpoint" in check.detail
    assert "deploy/output-pvc.yaml" in check.fix


def test_doctor_finds_the_output_volumes_claim(cluster, config, proc):
    config.k8s.output_volume = "rngdctl-output"
    assert not _doctor(config, proc).ok  # not there yet
    cluster.kmock.objects["v1/persistentvolumeclaims", "ml", "rngdctl-output"] = {
        "metadata": {"name": "rngdctl-output", "namespace": "ml"},
        "spec": {"resources": {"requests": {"storage": "500Gi"}}},
        "status": {"phase": "Bound"}}
    check = _doctor(config, proc)
    assert check.ok and "Bound, 500Gi, mounted at /rngdctl" in check.detail
