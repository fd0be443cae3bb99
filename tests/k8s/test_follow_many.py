"""Following many runs at once (kmock over HTTP): list calls whatever the number of runs, one
log read per running pod, every step stored once; and, with node agents, the foreign-holder
check after a launch reads the agent of the node the pod landed on, not the daemon's /proc."""

from __future__ import annotations

import collections

import pytest
from k8s_emulator import AGENTS, NODE, NS, stamp
from k8s_support import IMAGE, device_holder, publish_agents, start_line, step_line

from daemon.gates import nodes
from daemon.probes.holders import HolderRow

NODE2 = "rngd-node-2"
T0 = 1_767_225_600.0


def _launch(cluster, launcher, store, submit, node: str = NODE) -> tuple[int, str]:
    """A run claimed and launched on ``node``, its pod Running with a start and one step."""
    run_id = submit()
    assert store.claim_for_launch(run_id, launcher="k8s", node=node, per_node=8)
    launcher.launch(store.run(run_id))
    pod = cluster.start_pod(store.run(run_id)["job_name"], node=node)
    cluster.log(pod, [(stamp(T0 + 1), start_line(run_id)), (stamp(T0 + 2), step_line(1))])
    return run_id, pod


def _tick(cluster, daemon, now: float) -> tuple[collections.Counter, int]:
    """One daemon tick: (its requests but the log reads, by verb and path; its log reads)."""
    before = len(cluster.requests)
    daemon.tick(now=now)
    made = cluster.requests[before:]
    logs = sum(1 for r in made if r.subresource == "log")
    calls = collections.Counter(f"{r.method.value} {r.url.path}" for r in made
                                if r.subresource != "log")
    return calls, logs


def _one_more_step(cluster, pods: list[str], step: int) -> None:
    for pod in pods:  # each trainer writes its next step, in a second of its own
        cluster.log(pod, [(stamp(T0 + 10 + step), step_line(step))])


@pytest.fixture
def agents2(cluster, config, tmp_path):
    """Two nodes with live agents (published at T0 + 20, tick 5 s: live until T0 + 35)."""
    cluster.add_node(NODE2, cards=8, images=[IMAGE])
    publish_agents(config, tmp_path, [(NODE, T0 + 20), (NODE2, T0 + 20)])
    config.k8s.agents, config.k8s.node = True, None


@pytest.mark.parametrize("with_agents", [False, True], ids=["one-node", "agents"])
def test_a_tick_makes_the_same_list_calls_for_four_runs_as_for_one_and_stores_each_step_once(
        request, cluster, config, launcher, daemon, store, submit, with_agents):
    if with_agents:
        request.getfixturevalue("agents2")
    where = [NODE, NODE2, NODE, NODE2] if with_agents else [NODE] * 4
    first = _launch(cluster, launcher, store, submit, where[0])
    _tick(cluster, daemon, T0 + 21)  # ingests the start and step 1: the run is checked
    one, one_logs = _tick(cluster, daemon, T0 + 22)

    runs = [first] + [_launch(cluster, launcher, store, submit, node) for node in where[1:]]
    pods = [pod for _, pod in runs]
    _tick(cluster, daemon, T0 + 23)
    step = 1
    for now in (T0 + 24, T0 + 25, T0 + 26):
        step += 1
        _one_more_step(cluster, pods, step)
        four, four_logs = _tick(cluster, daemon, now)
        # The same calls, none of them for one Job or pod by name: lists only.
        assert four == one, (four, one)
        assert not [c for c in four if c.startswith("GET") and ("/jobs/" in c or "/pods/" in c)]
        assert (one_logs, four_logs) == (1, 4)  # one log read per running pod
    assert sum(four.values()) <= 2
    for run_id, _ in runs:
        steps = [s["step"] for s in store.steps(run_id)]
        assert steps == list(range(1, step + 1)), (run_id, steps)
        assert store.run(run_id)["status"] == "running"


def test_a_run_whose_pod_ended_is_finished_from_the_list_calls_of_the_tick(
        cluster, launcher, daemon, store, submit):
    runs = [_launch(cluster, launcher, store, submit) for _ in range(3)]
    _tick(cluster, daemon, T0 + 21)
    (done_id, done_pod), (failed_id, failed_pod), (running_id, _) = runs
    cluster.set_pod(done_pod, phase="Succeeded",
                    state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    cluster.set_pod(failed_pod, phase="Failed",
                    state={"terminated": {"exitCode": 1, "reason": "Error"}})
    calls, logs = _tick(cluster, daemon, T0 + 22)
    assert store.run(done_id)["status"] == "done"
    assert store.run(failed_id)["status"] == "failed"
    assert store.run(failed_id)["exit_reason"].startswith("exit code 1 (Error)")
    assert store.run(running_id)["status"] == "running"
    # The pods said how they ended: no Job was fetched or listed, for any run.
    assert not [c for c in calls if c.startswith("GET") and "/jobs" in c], calls
    assert logs == 3


def _agent_says(cluster, node: str, holders: list[HolderRow], at: float) -> None:
    """``node``'s agent publishes these device holders at ``at``."""
    reading = {"v": 1, "time": at, "load": [1.0, 1.0, 1.0], "complete": True,
               "visibility": "every process is visible", "holders": [h.as_dict() for h in holders],
               "cards": [], "idle_since": {}}
    cluster.put("v1/configmaps", nodes.agent_configmap(node, AGENTS, reading, heartbeat=at,
                                                       tick=5.0), AGENTS)


def _launched_on_node2(agents2, cluster, daemon, store, submit) -> tuple[int, str, str]:
    run_id = submit(node=NODE2)
    for now in (T0 + 21, T0 + 22):
        daemon.tick(now=now)
    job = store.run(run_id)["job_name"]
    assert job, store.gate_checks(run_id=run_id)[-1]["gates"]
    return run_id, job, cluster.start_pod(job, node=NODE2)


def test_with_agents_a_foreign_holder_on_the_pods_node_deletes_the_job_and_requeues(
        agents2, cluster, daemon, store, submit, proc):
    run_id, job, pod = _launched_on_node2(agents2, cluster, daemon, store, submit)
    # The daemon's own /proc is empty; node-2's agent sees our pod's trainer and a notebook.
    _agent_says(cluster, NODE2, [
        HolderRow(node=NODE2, cards=("npu0",), pid=4242, user="root",
                  command="python -m trainer train", pod=f"{NS}/{pod}", job=job, run=run_id,
                  home=store.home_id, files=("/dev/rngd/npu0pe0",)),
        HolderRow(node=NODE2, cards=("npu1",), pid=999, user="kim", command="python bench.py",
                  pod="research/notebook", files=("/dev/rngd/npu1pe0",)),
    ], at=T0 + 23)
    daemon.tick(now=T0 + 23)
    assert store.run(run_id)["status"] == "queued"  # requeued: a transient failure
    assert cluster.get("batch/v1/jobs", job) is None
    [event] = store.events(run_id=run_id, kinds=["foreign_holder"])
    assert event["message"].startswith(
        f"pid 999 (kim: python bench.py) holds /dev/rngd/npu1pe0, and it is not our pod {pod} "
        f"(agent on {NODE2})")


def test_with_agents_a_holder_in_the_daemons_own_proc_is_not_taken_for_the_pods_node(
        agents2, cluster, daemon, store, submit, proc):
    run_id, job, pod = _launched_on_node2(agents2, cluster, daemon, store, submit)
    # This host (the daemon's) has a process on a card; node-2 holds only our trainer.
    device_holder(proc, 999, "0::/user.slice/user-1000.slice/session-3.scope\n")
    _agent_says(cluster, NODE2, [
        HolderRow(node=NODE2, cards=("npu0",), pid=4242, user="root",
                  command="python -m trainer train", pod=f"{NS}/{pod}", job=job, run=run_id,
                  home=store.home_id, files=("/dev/rngd/npu0pe0",))], at=T0 + 23)
    daemon.tick(now=T0 + 23)
    assert store.run(run_id)["status"] == "running"
    assert cluster.get("batch/v1/jobs", job) is not None
    assert store.events(run_id=run_id, kinds=["foreign_holder"]) == []


def test_with_agents_a_holder_of_another_of_our_runs_on_the_node_is_not_foreign(
        agents2, cluster, config, daemon, launcher, store, submit, proc):
    config.k8s.runs_per_node = 2
    other_id, other_pod = _launch(cluster, launcher, store, submit, NODE2)
    run_id, _, _ = _launched_on_node2(agents2, cluster, daemon, store, submit)
    # The daemon's replica happens to run on node-2: its /proc shows the other run's trainer,
    # in the other run's pod. Only the agent's reading says whose run that pod is.
    uid = cluster.get("v1/pods", other_pod)["metadata"]["uid"]
    device_holder(proc, 4242, f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/x\n")
    _agent_says(cluster, NODE2, [
        HolderRow(node=NODE2, cards=("npu0",), pid=4242, user="root",
                  command="python -m trainer train", pod=f"{NS}/{other_pod}",
                  job=store.run(other_id)["job_name"], run=other_id, home=store.home_id,
                  files=("/dev/rngd/npu0pe0",))], at=T0 + 23)
    daemon.tick(now=T0 + 23)
    assert store.run(run_id)["status"] == "running"
    assert store.events(run_id=run_id, kinds=["foreign_holder"]) == []


def test_an_outage_of_the_ticks_pod_list_is_one_event_per_run_and_following_resumes_after_it(
        cluster, launcher, daemon, store, submit):
    runs = [_launch(cluster, launcher, store, submit) for _ in range(2)]
    pods = [pod for _, pod in runs]
    _tick(cluster, daemon, T0 + 21)
    # The list of our pods fails on every try of two ticks (3 tries a call in these tests).
    cluster.fail("get", "/api/v1/namespaces/ml/pods", times=6)
    for now in (T0 + 22, T0 + 23):
        daemon.tick(now=now)
    # One list a tick for both runs: the outage lasted both ticks (not 3 tries per run in
    # the first), each run has one event for it, and neither is back yet.
    for run_id, _ in runs:
        assert store.run(run_id)["status"] == "running"
        [down] = store.events(run_id=run_id, kinds=["k8s_unavailable"])
        assert "list_pods: no answer after 3 attempts" in down["message"]
        assert store.events(run_id=run_id, kinds=["k8s_available"]) == []
    _one_more_step(cluster, pods, 2)
    daemon.tick(now=T0 + 24)
    for run_id, _ in runs:
        assert [s["step"] for s in store.steps(run_id)] == [1, 2]
        assert len(store.events(run_id=run_id, kinds=["k8s_available"])) == 1


def test_a_pending_pod_is_followed_from_the_pod_list_without_reading_its_job(
        cluster, launcher, daemon, store, submit):
    _launch(cluster, launcher, store, submit)
    _tick(cluster, daemon, T0 + 21)
    running, _ = _tick(cluster, daemon, T0 + 22)
    pending = submit()
    assert store.claim_for_launch(pending, launcher="k8s", node=NODE, per_node=8)
    launcher.launch(store.run(pending))
    cluster.start_pod(store.run(pending)["job_name"], phase="Pending", state={
        "waiting": {"reason": "ContainerCreating"}})
    calls, logs = _tick(cluster, daemon, T0 + 23)
    assert calls == running and logs == 1  # the pending pod has no log yet
    assert store.run(pending)["status"] == "running"
