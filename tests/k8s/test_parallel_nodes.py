"""Several runs at once, one per node: 3 nodes, 2 live agents and 1 silent (kmock over HTTP).

rngd-node-1 has 8 cards, rngd-node-2 and rngd-node-3 4 each, all with the image
in their status.images; the agents of node-1 and node-2 published at T0 + 20
(tick 5 s: live until T0 + 35), the agent of node-3 at T0 (silent from T0 + 15).
"""

from __future__ import annotations

import time

import pytest
from k8s_emulator import AGENTS, NODE, NS
from k8s_support import IMAGE, publish_agents

from daemon.gates import nodes
from daemon.launchers.k8s import jobspec
from daemon.probes.holders import HolderRow

NODE2, NODE3 = "rngd-node-2", "rngd-node-3"
T0 = 1_767_225_600.0


@pytest.fixture
def nodes3(cluster, config, tmp_path):
    cluster.add_node(NODE2, cards=4, images=[IMAGE])
    cluster.add_node(NODE3, cards=4, images=[IMAGE])
    publish_agents(config, tmp_path, [(NODE3, T0), (NODE, T0 + 20), (NODE2, T0 + 20)])
    config.k8s.agents, config.k8s.node = True, None


def _since(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


def _job_node(cluster, run_id: int) -> str:
    [job] = [n for n in cluster.names("batch/v1/jobs") if n.startswith(f"rngd-{run_id}-")]
    return jobspec.pinned_node(cluster.get("batch/v1/jobs", job)["spec"]["template"]["spec"])


def _tick(daemon, clock, times):
    results = []
    for now in times:
        clock.now = now
        results.append(daemon.tick(now=now))
    return results


def _last_gates(store, run_id):
    return {g["name"]: g for g in store.gate_checks(run_id=run_id)[-1]["gates"]}


def test_two_runs_run_at_once_on_two_nodes_and_the_third_waits_for_room(
        nodes3, cluster, daemon, store, submit, clock):
    a, b, c = submit(cards=2), submit(cards=2), submit(cards=2)
    results = _tick(daemon, clock, [T0 + 21, T0 + 22, T0 + 23, T0 + 24, T0 + 25, T0 + 26])
    assert [r.launched for r in results] == [None, a, None, b, None, None]
    # Both run at once: the most cards first (node-1), then the only other live node.
    assert [store.run(r)["status"] for r in (a, b, c)] == ["running", "running", "queued"]
    assert (_job_node(cluster, a), _job_node(cluster, b)) == (NODE, NODE2)
    assert (store.run(a)["node"], store.run(b)["node"]) == (NODE, NODE2)
    gates = _last_gates(store, c)
    lines = gates["nodes"]["detail"].split("\n")
    assert lines == [f"{NODE}: run {a} is running on {NODE}",
                     f"{NODE2}: run {b} is running on {NODE2}",
                     f"{NODE3}: agent on {NODE3} silent since {_since(T0)}"]
    assert gates["one_at_a_time"]["verdict"] == "fail"

    # Run a ends (cancelled): node-1 has room again, and c goes there.
    store.request_cancel(a)
    results = _tick(daemon, clock, [T0 + 27, T0 + 28, T0 + 29])
    assert store.run(a)["status"] == "cancelled"
    assert c in [r.launched for r in results]
    assert store.run(c)["node"] == NODE and _job_node(cluster, c) == NODE


def test_runs_per_node_two_puts_two_runs_on_one_node_and_refuses_a_third(
        nodes3, cluster, daemon, store, submit, clock, config):
    config.k8s.runs_per_node = 2
    a, b, c = (submit(cards=2, node=NODE) for _ in range(3))
    _tick(daemon, clock, [T0 + 21 + i for i in range(8)])
    assert [store.run(r)["node"] for r in (a, b)] == [NODE, NODE]
    assert store.run(c)["status"] == "queued"
    one = _last_gates(store, c)["one_at_a_time"]
    assert (one["verdict"], one["detail"]) == (
        "fail", f"run {b} is running on {NODE} (2 of 2 per node)")


def test_our_own_runs_trainer_holding_cards_does_not_block_a_second_run_on_its_node(
        nodes3, cluster, daemon, store, submit, clock, config):
    config.k8s.runs_per_node = 2
    a, b = submit(cards=2, node=NODE), submit(cards=2, node=NODE)
    _tick(daemon, clock, [T0 + 21, T0 + 22])
    assert store.run(a)["status"] == "running"
    # node-1's agent now sees run a's trainer (in its Job's pod) holding npu0.
    row = HolderRow(node=NODE, cards=("npu0",), pid=777, user="root",
                    command="python -m trainer train", pod=f"{NS}/rngd-{a}-a1-x",
                    job=f"rngd-{a}-a1", run=a, home=store.home_id,
                    files=("/dev/rngd/npu0pe0",))
    reading = {"v": 1, "load": [1.0, 1.0, 1.0], "complete": True, "visibility": "",
               "holders": [row.as_dict()], "cards": [], "idle_since": {}}
    cluster.put("v1/configmaps", nodes.agent_configmap(NODE, AGENTS, reading, heartbeat=T0 + 22,
                                                       tick=5.0), AGENTS)
    results = _tick(daemon, clock, [T0 + 23, T0 + 24])
    assert b in [r.launched for r in results], store.gate_checks(run_id=b)[-1]["gates"]
    assert store.run(b)["node"] == NODE


def test_a_run_pinned_with_submit_node_goes_to_that_node_not_the_one_with_most_cards(
        nodes3, cluster, daemon, store, submit, clock):
    run_id = submit(cards=2, node=NODE2)
    _tick(daemon, clock, [T0 + 21, T0 + 22])
    assert _job_node(cluster, run_id) == NODE2


def test_a_run_pinned_to_the_silent_node_waits_and_names_it(
        nodes3, cluster, daemon, store, submit, clock):
    run_id = submit(cards=2, node=NODE3)
    _tick(daemon, clock, [T0 + 21, T0 + 22, T0 + 23])
    assert store.run(run_id)["status"] == "queued" and cluster.names("batch/v1/jobs") == []
    gates = _last_gates(store, run_id)
    assert gates["nodes"]["reading"] == NODE3
    assert gates["agent"]["detail"] == (f"agent on {NODE3} silent since "
                                        f"{_since(T0)}")


def test_equal_cards_go_to_the_node_that_has_the_image(
        nodes3, cluster, daemon, store, submit, clock):
    # node-2 now has 8 cards like node-1 but not the image; by name alone node-2 would win.
    cluster.patch("v1/nodes", NODE2, {"status": {"allocatable": {"furiosa.ai/rngd": "8"},
                                                 "images": []}}, namespace=None)
    run_id = submit(cards=2)
    _tick(daemon, clock, [T0 + 21, T0 + 22])
    assert _job_node(cluster, run_id) == NODE


def test_show_of_a_queued_run_names_the_closest_node_and_gives_every_nodes_verdict(
        nodes3, cluster, daemon, store, submit, clock, rngdctl):
    a, b, c = submit(cards=2), submit(cards=2), submit(cards=2)
    _tick(daemon, clock, [T0 + 21 + i for i in range(6)])
    code, out, err = rngdctl("show", str(c))
    assert code == 0, err
    lines = out.splitlines()
    [blocked] = [line for line in lines if line.startswith("  blocked")]
    assert blocked.endswith(f": closest node {NODE}: one_at_a_time: run {a} is running on {NODE}")
    at = lines.index(blocked)
    assert lines[at + 1:at + 4] == [
        f"    {NODE}: run {a} is running on {NODE}",
        f"    {NODE2}: run {b} is running on {NODE2}",
        f"    {NODE3}: agent on {NODE3} silent since {_since(T0)}"]


def test_gates_prints_each_nodes_verdict_under_the_table(cluster, config, home, tmp_path,
                                                         rngdctl, submit):
    cluster.add_node(NODE2, cards=4, images=[IMAGE])
    cluster.add_node(NODE3, cards=4, images=[IMAGE])
    now = time.time()
    publish_agents(config, tmp_path, [(NODE, now), (NODE2, now), (NODE3, now - 3600)], tick=60.0)
    home.config_path.write_text(f'[k8s]\nimage = "{IMAGE}"\nagents = true\n')
    submit(cards=2)
    code, out, err = rngdctl("gates", "--launcher", "k8s", "--namespace", NS, "--context", "emu")
    assert code == 0, err + out  # rngd-node-1 passes every gate
    lines = out.splitlines()
    [summary] = [i for i, line in enumerate(lines) if " nodes " in line]
    assert f"{NODE}" in lines[summary] and "2 of 3 would launch" in lines[summary]
    verdicts = [lines[summary].split("would launch", 1)[1].strip(),
                *(line.strip() for line in lines[summary + 1:summary + 3])]
    assert [v.split(":")[0] for v in verdicts] == [NODE, NODE2, NODE3]
    assert verdicts[0].endswith("idle → would launch") and verdicts[1].endswith(
        "idle → would launch")
    assert verdicts[2].startswith(f"{NODE3}: agent on {NODE3} silent since ")


def test_runs_and_show_say_which_node_each_active_run_is_on(
        nodes3, cluster, daemon, store, submit, clock, rngdctl):
    a, b = submit(cards=2), submit(cards=2)
    _tick(daemon, clock, [T0 + 21 + i for i in range(4)])
    code, out, err = rngdctl("runs")
    assert code == 0, err
    where = {int(line.split()[0]): line.split("  on ")[1].split()[0]
             for line in out.splitlines() if "  on rngd-node-" in line}
    assert where == {a: NODE, b: NODE2}
    code, out, err = rngdctl("show", str(b))
    assert code == 0, err
    assert f"  node: {NODE2}" in out.splitlines()


def test_a_launch_after_the_agents_gate_check_reads_no_node_again(
        nodes3, cluster, daemon, store, submit, clock, launcher):
    run_id = submit(cards=2)
    _tick(daemon, clock, [T0 + 21])
    before = launcher.client.calls.copy()
    [result] = _tick(daemon, clock, [T0 + 22])
    assert result.launched == run_id
    calls = launcher.client.calls - before
    # The gate check's 3 lists, then the Job: its card resource comes from the node listed.
    assert calls == {"list_nodes": 1, "list_live_pods": 1, "list_configmaps": 1,
                     "create_job": 1}
    assert cluster.get("batch/v1/jobs", store.run(run_id)["job_name"])["spec"]["template"][
        "spec"]["containers"][0]["resources"]["limits"] == {"furiosa.ai/rngd": "2"}
