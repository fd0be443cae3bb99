"""End to end: `rngdctl daemon --launcher k8s` against the emulator, in a subprocess."""

from __future__ import annotations

from k8s_emulator import NODE
from k8s_support import IMAGE, end_line, job_of, start_line, step_line


def test_the_daemon_runs_a_queued_run_as_a_job_to_done(cluster, home, store, rngdctl, submit):
    run_id = submit(steps=3)
    cluster.kmock.autopilot = [start_line(run_id), step_line(1), step_line(2), step_line(3),
                               end_line()]
    home.config_path.write_text(f'[k8s]\nnode = "{NODE}"\nimage = "{IMAGE}"\n')
    code, _, err = rngdctl("daemon", "--launcher", "k8s", "--namespace", "ml", "--context",
                           "emu", "--tick", "0.1", "--exit-when-idle",
                           env={"KUBECONFIG": str(cluster.kubeconfig)}, timeout=60)
    assert code == 0, err
    run = store.run(run_id)
    assert run["status"] == "done", store.events(run_id=run_id)
    assert [s["step"] for s in store.steps(run_id)] == [1, 2, 3]
    assert cluster.names("batch/v1/jobs") == [job_of(store, run_id, 1)]
    checks = store.gate_checks(run_id=run_id)
    assert [c["passed"] for c in checks][-2:] == [1, 1]  # two ticks in a row before the launch


def test_gates_flags_name_the_node_and_image_over_config(cluster, home, rngdctl, submit):
    import json

    submit(steps=3)
    home.config_path.write_text('[k8s]\nnode = "not-this-node"\nimage = "not/this:image"\n')
    code, out, err = rngdctl("gates", "--launcher", "k8s", "--context", "emu", "--node", NODE,
                             "--image", IMAGE, "--json",
                             env={"KUBECONFIG": str(cluster.kubeconfig)}, timeout=60)
    assert code == 0, err
    gates = {g["name"]: g for g in json.loads(out)["gates"]}
    assert gates["cards_free"]["verdict"] == "pass", gates["cards_free"]
    assert "not-this-node" not in gates["cards_free"]["detail"]
