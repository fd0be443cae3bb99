"""The Job the launcher creates, read back from the emulator."""

from __future__ import annotations

import re

from conftest import IMAGE
from k8s_emulator import NODE

from daemon.k8s import jobspec

DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_the_job_runs_once_on_the_node_with_its_cards_deadline_and_ttl(cluster, running, store):
    run_id, name = running(cards=2, deadline=1800)
    job = cluster.get("batch/v1/jobs", name)
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 1800
    assert spec["ttlSecondsAfterFinished"] == 600
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": NODE}
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["furiosa.ai/rngd"] == "2"
    assert resources["limits"]["furiosa.ai/rngd"] == "2"
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "rngdctl"
    assert job["metadata"]["labels"]["rngdctl.io/run-id"] == str(run_id)
    assert store.run(run_id)["status"] == "running"


def test_the_trainer_argv_is_a_list_with_the_run_settings(cluster, running):
    _, name = running(cards=2, resident=6, steps=40, baseline=True)
    container = cluster.get("batch/v1/jobs", name)["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"]
    assert argv[:4] == ["python", "-m", "trainer", "train"]
    assert argv[argv.index("--resident-layers") + 1] == "6"
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
    assert pod["serviceAccountName"] == "rngd-trainer"


def test_a_bad_volume_entry_is_one_clear_config_error(running, config):
    import pytest

    from daemon.errors import ConfigError

    config.k8s.volumes = [{"name": "x", "mount": "/x"}]
    with pytest.raises(ConfigError, match=r"volumes\[0\] needs exactly one of host_path or pvc"):
        running()


def test_names_are_dns_1123_and_at_most_63_characters():
    run = {"id": 123456, "attempts": 3, "name": "Resident_8 layers..Llama-3.1-8B " * 4,
           "config": {}}
    for stage in (jobspec.TRAIN, jobspec.COMPILE):
        name = jobspec.job_name(run, stage)
        assert len(name) <= 63 and DNS_1123.match(name), name
        assert name.startswith(f"rngd-123456-a3-{'compile-' if stage == 'compile' else ''}")
    pull = jobspec.prepull_name("Registry.Example:5000/Team/Furiosa_LLM:2026.1@sha256:" + "f" * 64,
                                NODE)
    assert len(pull) <= 63 and DNS_1123.match(pull)


def test_precompile_runs_a_cardless_compile_job_then_the_card_job(cluster, running, launcher,
                                                                  store):
    run_id, name = running(precompile=True)
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


def test_a_failed_compile_fails_the_run_before_any_card_is_asked(cluster, running, launcher,
                                                                store):
    run_id, name = running(precompile=True)
    cluster.start_pod(name, phase="Failed",
                      state={"terminated": {"exitCode": 1, "reason": "Error"}})
    outcome = launcher.follow(store.run(run_id))
    assert outcome.status == "failed" and outcome.reason.startswith(f"compile Job {name}")
    assert cluster.names("batch/v1/jobs") == [name]
