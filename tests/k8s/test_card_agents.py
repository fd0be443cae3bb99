"""Card health with node agents: each agent publishes its node's card readings, the daemon
gates each node on its own cards and stores every node's readings (kmock over HTTP)."""

from __future__ import annotations

import pytest
from k8s_emulator import AGENTS, NODE

from daemon.launchers.k8s.agent import Agent
from daemon.launchers.k8s.client import K8sClient

NODE2 = "rngd-node-2"
T0 = 1_767_225_600.0


def _cards(*temps, throttle=()):
    return [{"card": f"npu{i}", "uuid": f"u{i}", "alive": True, "temp_c": t, "power_w": 90.0,
             "power_limit_w": 180.0, "util": 0.5, "memory_used": 0, "memory_total": 47 << 30,
             "throttle": list(throttle) if i == 1 else [], "cores_occupied": []}
            for i, t in enumerate(temps)]


@pytest.fixture
def agents(cluster, config, tmp_path):
    """rngd-node-1 (8 cards, npu1 thermally throttled), rngd-node-2 (4 cards, cool)."""
    cluster.add_node(NODE2, cards=4)
    readings = {NODE: (_cards(60.0, 91.0, throttle=["ThermalSlowdown"]), None),
                NODE2: (_cards(40.0, 41.0), None)}
    made = []
    for node in (NODE, NODE2):
        proc = tmp_path / f"proc-{node}"
        proc.mkdir()
        client, _ = K8sClient.from_config(config.k8s)
        agent = Agent(client, namespace=AGENTS, node=node, tick=5.0, proc=str(proc),
                      read_cards=lambda node=node: readings[node])
        agent.publish(now=T0)
        made.append(agent)
    yield readings
    for agent in made:
        agent.client.close()


def test_each_node_is_gated_on_its_own_cards_and_the_run_goes_to_the_healthy_one(
        agents, cluster, daemon, store, submit, config, clock):
    config.k8s.agents, config.k8s.node = True, None
    run_id = submit(cards=2)
    clock.now = T0 + 1
    daemon.tick(now=T0 + 1)
    check = store.gate_checks(run_id=run_id)[-1]
    gates = {g["name"]: g for g in check["gates"]}
    lines = gates["nodes"]["detail"].split("\n")
    assert lines[0] == (f"{NODE}: npu1 throttling: thermal slowdown, soc_peak 91.0 °C > "
                        f"max_temp_c 90")
    assert lines[1].startswith(f"{NODE2}: 4 cards free")
    assert gates["card_health"]["verdict"] == "pass"  # the launch node, rngd-node-2
    assert gates["card_health"]["detail"] == f"{NODE2}: 2 cards healthy (hottest npu1 41.0 °C)"


def test_the_daemon_stores_every_nodes_cards_once_per_agent_heartbeat(
        agents, daemon, store, config, clock):
    config.k8s.agents, config.k8s.node = True, None
    for now in (T0 + 1, T0 + 12):  # the agents did not publish again: stored once
        clock.now = now
        daemon.tick(now=now)
    rows = store.card_samples()
    assert sorted((r["node"], r["card"], r["temp_c"]) for r in rows) == [
        (NODE, "npu0", 60.0), (NODE, "npu1", 91.0), (NODE2, "npu0", 40.0),
        (NODE2, "npu1", 41.0)]
    assert {r["throttled"] for r in rows if r["node"] == NODE and r["card"] == "npu1"} == {1}
