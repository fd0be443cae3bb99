"""Node agents: 3 nodes, 2 live agents and 1 silent; kmock over HTTP with the real client."""

from __future__ import annotations

import json
import os
import re

import pytest
from k8s_emulator import AGENTS, NODE

from daemon.gates import nodes
from daemon.launchers.k8s import jobspec
from daemon.launchers.k8s.agent import Agent
from daemon.launchers.k8s.client import K8sClient

NODE2, NODE3 = "rngd-node-2", "rngd-node-3"
T0 = 1_767_225_600.0


def _proc(root, holders=()):
    root.mkdir()
    for pid, cmd, device in holders:
        d = root / str(pid)
        (d / "fd").mkdir(parents=True)
        os.symlink(device, d / "fd" / "3")
        (d / "cmdline").write_bytes(cmd)
        (d / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    return root


def _no_cards():
    return [], "furiosa-smi not found: no card readings"


@pytest.fixture
def agents(cluster, config, tmp_path):
    """rngd-node-1 (8 cards, idle), -2 (4 cards, bench.py holds npu1), -3 (4 cards, agent
    silent since T0); the live agents published at T0 + 20."""
    cluster.add_node(NODE2, cards=4)
    cluster.add_node(NODE3, cards=4)
    made = {}
    for node, holders in [(NODE, ()), (NODE2, [(4121, b"python\0bench.py\0",
                                                "/dev/rngd/npu1pe0")]), (NODE3, ())]:
        client, _ = K8sClient.from_config(config.k8s)
        made[node] = Agent(client, namespace=AGENTS, node=node, tick=5.0,
                           proc=str(_proc(tmp_path / f"proc-{node}", holders)),
                           read_cards=_no_cards)
    made[NODE3].publish(now=T0)
    made[NODE].publish(now=T0 + 20)
    made[NODE2].publish(now=T0 + 20)
    yield made
    for agent in made.values():
        agent.client.close()


def test_an_agent_publishes_its_reading_and_heartbeat_in_its_configmap(agents, cluster):
    cm = cluster.get("v1/configmaps", nodes.configmap_name(NODE2), AGENTS)
    assert cm["data"]["node"] == NODE2 and float(cm["data"]["heartbeat"]) == T0 + 20
    reading = json.loads(cm["data"]["reading"])
    [row] = reading["holders"]
    assert (row["pid"], row["cards"], row["mark"], row["orphan"]) == (
        4121, ["npu1"], "orphan", "in no pod")
    assert reading["cards_note"] == "furiosa-smi not found: no card readings"
    agents[NODE2].publish(now=T0 + 25)  # the next tick patches the same object
    again = cluster.get("v1/configmaps", nodes.configmap_name(NODE2), AGENTS)
    assert float(again["data"]["heartbeat"]) == T0 + 25
    assert cluster.names("v1/configmaps", AGENTS).count(nodes.configmap_name(NODE2)) == 1


def test_the_daemon_reads_every_node_in_three_list_calls_whatever_their_number(
        agents, cluster, launcher):
    for i in range(4, 24):
        cluster.add_node(f"rngd-node-{i}", cards=4)
    before = sum(launcher.client.calls.values())
    states = launcher.node_states()
    assert sum(launcher.client.calls.values()) - before == 3
    assert len(states) == 23
    assert {s.name: s.agent is not None for s in states}[NODE3] is True


def _tick_gates(daemon, store, run_id, now):
    daemon.tick(now=now)
    return {g["name"]: g for g in store.gate_checks(run_id=run_id)[-1]["gates"]}


def test_each_nodes_verdict_is_given_and_the_silent_one_is_blocked_with_since(
        agents, cluster, daemon, store, submit, config, clock):
    config.k8s.agents, config.k8s.node = True, None
    run_id = submit(cards=2)
    clock.now = T0 + 21
    gates = _tick_gates(daemon, store, run_id, T0 + 21)
    lines = gates["nodes"]["detail"].split("\n")
    assert re.fullmatch(rf"{NODE}: 8 cards free, load [\d.]+, idle → would launch", lines[0])
    assert lines[1].startswith(f"{NODE2}: pid 4121 python bench.py (") and lines[1].endswith(
        "holds npu1 (orphan: in no pod)")
    since = __import__("time").strftime("%H:%M", __import__("time").localtime(T0))
    assert lines[2] == f"{NODE3}: agent on {NODE3} silent since {since}"
    assert gates["agent"]["verdict"] == "pass"  # the launch node, rngd-node-1, is live


def test_a_run_pinned_to_the_silent_node_is_blocked_and_the_reason_names_it(
        agents, cluster, daemon, store, submit, config, clock):
    config.k8s.agents, config.k8s.node = True, NODE3
    run_id = submit(cards=2)
    clock.now = T0 + 21
    for now in (T0 + 21, T0 + 26):
        gates = _tick_gates(daemon, store, run_id, now)
    assert gates["agent"]["verdict"] == "fail"
    assert gates["agent"]["detail"].startswith(f"agent on {NODE3} silent since ")
    assert store.run(run_id)["status"] == "queued"
    assert cluster.names("batch/v1/jobs") == []


def test_the_head_goes_to_the_node_where_every_gate_passes_with_most_cards(
        agents, cluster, daemon, store, submit, config, clock):
    config.k8s.agents, config.k8s.node = True, None
    run_id = submit(cards=2)
    for now in (T0 + 21, T0 + 22):
        clock.now = now
        daemon.tick(now=now)
    [job] = cluster.names("batch/v1/jobs")
    spec = cluster.get("batch/v1/jobs", job)["spec"]["template"]["spec"]
    assert jobspec.pinned_node(spec) == NODE
    assert store.run(run_id)["node"] == NODE


def test_an_agent_on_a_card_host_publishes_each_cards_readings(
        cluster, config, tmp_path, monkeypatch):
    from smi_fakes import card, fake_binding, set_cards

    # A card host: furiosa_smi importable by the agent's python (the stand-in).
    site = fake_binding(tmp_path, [card(0, soc_peak=44.0, power_w=71.5, occupied=[0],
                                        counters={"0": [1000, 0]}),
                                   card(1, throttle=["ThermalSlowdown"])])
    monkeypatch.setenv("PYTHONPATH", str(site))
    client, _ = K8sClient.from_config(config.k8s)
    try:
        agent = Agent(client, namespace=AGENTS, node=NODE, tick=5.0, proc=str(_proc(tmp_path / "proc")))
        agent.publish(now=T0)
        set_cards(site, [card(0, soc_peak=44.0, power_w=71.5, occupied=[0],
                              counters={"0": [3000, 1600]}), card(1, throttle=["ThermalSlowdown"])])
        agent.publish(now=T0 + 5)
    finally:
        client.close()
    reading = json.loads(cluster.get("v1/configmaps", nodes.configmap_name(NODE), AGENTS)["data"][
        "reading"])
    assert reading["cards_note"] is None
    npu0, npu1 = reading["cards"]
    assert (npu0["card"], npu0["temp_c"], npu0["power_w"]) == ("npu0", 44.0, 71.5)
    assert npu0["util"] == pytest.approx(0.8 / 8)  # the second tick: since the first
    assert npu1["throttle"] == ["ThermalSlowdown"]
    # What the daemon reads back, for the node's card-health gate and the TUI.
    agent_reading = nodes.parse_agent(cluster.get("v1/configmaps", nodes.configmap_name(NODE),
                                                   AGENTS))
    assert [c["card"] for c in agent_reading.cards] == ["npu0", "npu1"]
