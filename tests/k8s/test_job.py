"""The Job the launcher creates, read back from the emulator."""

from __future__ import annotations

import re

import pytest
from k8s_emulator import NODE
from k8s_support import IMAGE, end_line, job_of, start_line, step_line

from daemon.launchers.k8s import jobspec

DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_the_job_runs_once_on_the_node_with_its_cards_deadline_and_ttl(cluster, running, store):
    run_id, name = running(cards=2, deadline=1800)
    job = cluster.get("batch/v1/jobs", name)
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 1800
    assert spec["ttlSecondsAfterFinished"] == 600
    assert pod["restartPolicy"] == "Never"
    assert pod["affinity"]["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}
    assert "nodeSelector" not in pod
    assert pod["automountServiceAccountToken"] is False
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["furiosa.ai/rngd"] == "2"
    assert resources["limits"]["furiosa.ai/rngd"] == "2"
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "rngdctl"
    assert job["metadata"]["labels"]["rngdctl.io/run-id"] == str(run_id)
    assert job["metadata"]["labels"]["app.kubernetes.io/instance"] == store.home_id
    assert store.run(run_id)["status"] == "running"


def test_the_launch_event_records_what_the_job_really_has(cluster, running, store):
    run_id, name = running(cards=2, deadline=1800)
    [event] = store.events(run_id=run_id, kinds=["launch"])
    assert event["data"] == {"job": name, "namespace": "ml", "stage": "train", "node": NODE,
                             "image": IMAGE, "cards": 2, "activeDeadlineSeconds": 1800,
                             "ttlSecondsAfterFinished": 600}
    assert "activeDeadlineSeconds 1800, ttlSecondsAfterFinished 600" in event["message"]


def test_the_trainer_argv_is_a_list_with_the_run_settings(cluster, running):
    _, name = running(model="llama-3.1-8b-mini", cards=2, resident=3, steps=40, baseline=True)
    container = cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"]
    assert argv[:4] == ["python", "-m", "trainer", "train"]
    assert argv[argv.index("--resident-layers") + 1] == "3"
    assert argv[argv.index("--steps") + 1] == "40"
    assert "--baseline" in argv  # the all-offload pass runs first, in the same Job
    assert container["image"] == IMAGE


def test_the_deadline_defaults_to_the_config(cluster, running, config):
    _, name = running()
    assert cluster.get("batch/v1/jobs", name)["spec"]["activeDeadlineSeconds"] == \
        config.k8s.default_deadline


def test_env_volumes_and_requests_come_from_the_config(cluster, running, config):
    config.k8s.env = {"FURIOSA_LOG": "info"}
    config.k8s.volumes = [{"name": "models", "host_path": "/data/models", "mount": "/models",
                           "read_only": True},
                          {"name": "Compile Cache", "pvc": "cache", "mount": "/cache"}]
    config.k8s.cpu, config.k8s.memory = "16", "200Gi"
    config.k8s.service_account = "rngd-trainer"
    config.k8s.pull_policy = "Always"
    _, name = running()
    pod = cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert {"name": "FURIOSA_LOG", "value": "info"} in container["env"]
    assert pod["volumes"] == [{"name": "models", "hostPath": {"path": "/data/models"}},
                              {"name": "compile-cache",
                               "persistentVolumeClaim": {"claimName": "cache"}}]
    assert container["volumeMounts"][0] == {"name": "models", "mountPath": "/models",
                                            "readOnly": True}
    assert container["resources"]["requests"]["memory"] == "200Gi"
    assert container["resources"]["requests"]["cpu"] == "16"
    assert container["imagePullPolicy"] == "Always"
    assert pod["serviceAccountName"] == "rngd-trainer"


def test_a_bad_volume_entry_fails_the_launch_with_one_clear_line(cluster, daemon, submit, store,
                                                                config):
    config.k8s.volumes = [{"name": "x", "mount": "/x"}]
    run_id = submit()
    daemon.tick(now=1)
    daemon.tick(now=2)
    run = store.run(run_id)
    assert run["status"] == "failed"
    assert run["exit_reason"] == (f"cannot create Job ml/{job_of(store, run_id, 1)}: "
                                  "config.toml: [k8s] volumes[0] needs exactly one of host_path "
                                  "or pvc")
    assert cluster.names("batch/v1/jobs") == []


def test_names_are_dns_1123_at_most_63_characters_and_name_their_home():
    run = {"id": 123456, "attempts": 3, "name": "Resident_8 layers..Llama-3.1-8B " * 4,
           "config": {}}
    home = "0123456789abcdef"
    for stage in (jobspec.TRAIN, jobspec.COMPILE):
        name = jobspec.job_name(run, stage, home=home)
        assert len(name) <= 63 and DNS_1123.match(name), name
        assert name.startswith(f"rngd-123456-a3-01234567-"
                               f"{'compile-' if stage == 'compile' else ''}")
    pull = jobspec.prepull_name("Registry.Example:5000/Team/Furiosa_LLM:2026.1@sha256:" + "f" * 64,
                                NODE, home=home)
    assert len(pull) <= 63 and DNS_1123.match(pull)


@pytest.mark.parametrize("where", ["--precompile", "config"])
def test_precompile_runs_a_cardless_compile_job_then_the_card_job(cluster, running, launcher,
                                                                  store, config, where):
    config.k8s.precompile = where == "config"
    run_id, name = running(precompile=where == "--precompile")
    job = cluster.get("batch/v1/jobs", name)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][3] == "compile"
    assert "furiosa.ai/rngd" not in str(container["resources"])
    pod = cluster.start_pod(name, phase="Succeeded",
                            state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    cluster.log(pod, [("2026-01-01T00:00:02Z", "compiled 12 graphs")])
    cluster.finish_job(name, "Complete")

    assert launcher.follow(store.run(run_id)) is None
    card_job = store.run(run_id)["job_name"]
    assert card_job != name
    train = cluster.get("batch/v1/jobs", card_job)["spec"]["template"]["spec"]["containers"][0]
    assert train["command"][3] == "train"
    assert train["resources"]["limits"]["furiosa.ai/rngd"] == "2"
    assert "compiled 12 graphs" in (launcher.home.run_dir(run_id) / "compile.log").read_text()
    stages = [e["data"]["stage"] for e in store.events(run_id=run_id, kinds=["launch"])]
    assert stages == ["compile", "train"]


def test_a_failed_compile_fails_the_run_before_any_card_is_asked(cluster, running, launcher,
                                                                store):
    run_id, name = running(precompile=True)
    pod = cluster.start_pod(name, phase="Failed",
                            state={"terminated": {"exitCode": 1, "reason": "Error"}})
    cluster.log(pod, [("2026-01-01T00:00:02Z", "CompileError: graph 3 exceeds the SRAM")])
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "failed" and outcome.reason.startswith(f"compile Job {name}")
    assert outcome.reason.endswith("--- log tail ---\nCompileError: graph 3 exceeds the SRAM")
    assert cluster.names("batch/v1/jobs") == [name]


def test_a_card_job_stored_despite_a_503_is_adopted_when_the_retried_create_meets_it(
        cluster, running, launcher, store):
    run_id, name = running(precompile=True)
    cluster.start_pod(name, phase="Succeeded",
                      state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    cluster.finish_job(name, "Complete")
    # The API server stores the Job but the answer is lost: the retry meets a 409.
    cluster.fail("post", "/apis/batch/v1/namespaces/ml/jobs", times=1, payload=503)
    assert launcher.follow(store.run(run_id)) is None
    run = store.run(run_id)
    assert run["status"] == "running" and run["job_name"] == job_of(store, run_id, 1)
    assert cluster.names("batch/v1/jobs") == [run["job_name"], name]
    [adopt] = store.events(run_id=run_id, kinds=["adopt"])
    assert adopt["data"]["stage"] == "train" and adopt["data"]["cards"] == 2


def test_the_experiment_note_reports_the_deadline_and_ttl_the_job_was_created_with(
        cluster, running, launcher, store, config, tmp_path):
    from rngdctl.export import write_note

    run_id, name = running(deadline=1800)
    pod = cluster.start_pod(name, phase="Succeeded",
                            state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    cluster.log(pod, [("2026-01-01T00:00:02Z", start_line(run_id)),
                      ("2026-01-01T00:00:03Z", step_line(1)), ("2026-01-01T00:00:04Z", "done")])
    store.finish_run(run_id, launcher.follow(store.run(run_id)).status)
    config.k8s.ttl_seconds = 5  # changed since: the note must not take it from here
    text = write_note(store, [run_id], tmp_path, k8s=config.k8s).read_text()
    assert (f"- Launch: one run-and-exit Kubernetes Job at a time, Job ml/{name} on node "
            f"{NODE}, activeDeadlineSeconds 1800, ttlSecondsAfterFinished 600.") in text
    assert f"image {IMAGE}, image digest registry.example/furiosa-llm@sha256:" in text


def test_baseline_and_the_asked_config_run_in_one_job_and_both_passes_are_stored(
        cluster, running, launcher, store):
    run_id, name = running(baseline=True)
    pod = cluster.start_pod(name)
    cluster.log(pod, [("2026-01-01T00:00:02Z", start_line(run_id, "baseline")),
                      ("2026-01-01T00:00:03Z", step_line(1, label="baseline")),
                      ("2026-01-01T00:00:04Z", start_line(run_id)),
                      ("2026-01-01T00:00:05Z", step_line(1)),
                      ("2026-01-01T00:00:06Z", end_line())])
    cluster.set_pod(pod, phase="Succeeded", state={"terminated": {"exitCode": 0,
                                                                  "reason": "Completed"}})
    assert launcher.follow(store.run(run_id)).status == "done"
    assert cluster.names("batch/v1/jobs") == [name]  # one Job for both passes
    assert [p["config_label"] for p in store.passes(run_id)] == ["baseline", "main"]
    assert len(store.steps(run_id, "baseline")) == 1 and len(store.steps(run_id)) == 1


def test_after_the_compile_the_card_job_waits_until_its_cards_are_free_again(
        cluster, running, launcher, store):
    run_id, name = running(precompile=True)
    cluster.start_pod(name, phase="Succeeded",
                      state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    cluster.finish_job(name, "Complete")
    cluster.add_pod("grabbed-meanwhile", cards=7, namespace="alice")

    assert launcher.follow(store.run(run_id)) is None
    assert launcher.follow(store.run(run_id)) is None
    assert store.run(run_id)["job_name"] == name  # no card Job yet
    [waiting] = [e for e in store.events(run_id=run_id, kinds=["compile"])]
    assert "waiting for 2 cards" in waiting["message"]

    cluster.patch("v1/pods", "grabbed-meanwhile", {"status": {"phase": "Succeeded"}},
                  namespace="alice")
    assert launcher.follow(store.run(run_id)) is None
    assert store.run(run_id)["job_name"] != name
