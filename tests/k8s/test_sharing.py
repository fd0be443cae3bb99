"""A namespace and a cluster shared (issue 34): another home's pods, holders and Lease are
never ours; each node's agent has a ConfigMap name of its own; cards the device plugin cuts
into partitions are named, and counted in that unit when asked."""

from __future__ import annotations

import pytest
from k8s_emulator import LEASES, NODE, NS
from k8s_support import Clock

from daemon.gates import nodes
from daemon.launchers.k8s import jobspec
from daemon.probes.holders import HolderRow

OTHER_HOME = "feedfacecafebeef"
PARTITION = "furiosa.ai/rngd-2core.12gb"

# === another home's objects ====================================================


def test_a_pre_pull_pod_of_another_home_is_left_alone_at_startup(cluster, launcher, config):
    name = jobspec.prepull_name(config.k8s.image, NODE, home=OTHER_HOME)
    cluster.put("v1/pods", {**jobspec.prepull_pod(config.k8s, name=name, node=NODE,
                                                 image=config.k8s.image, run_id=1,
                                                 home=OTHER_HOME),
                            "status": {"phase": "Succeeded"}})
    launcher.startup()
    assert cluster.get("v1/pods", name) is not None  # its home's daemon takes it over


def _holder(run: int, home: str) -> HolderRow:
    return HolderRow(node=NODE, cards=("npu0",), pid=77, user="root",
                     command="python -m trainer train", pod=f"{NS}/rngd-{run}-a1-x", run=run,
                     home=home, files=("/dev/rngd/npu0pe0",))


def test_another_homes_run_1_holding_cards_is_foreign_to_our_run_1(store):
    agent = nodes.AgentReading(node=NODE, heartbeat=0.0, tick=5.0, load=(0, 0, 0),
                               holders=(_holder(1, store.home_id), _holder(1, OTHER_HOME)),
                               complete=True, visibility="", cards=(), cards_note=None,
                               idle_since={})
    [foreign] = nodes.foreign_holders(agent, {1}, store.home_id)
    assert foreign.home == OTHER_HOME


def test_a_lease_of_another_home_is_never_taken_even_when_expired(cluster, launcher, store):
    from daemon.launchers.k8s.leader import LeaderElector

    cluster.put(LEASES, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "rngdctl-daemon", "namespace": NS,
                     "labels": jobspec.selector(OTHER_HOME)},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1}})  # released: free to take
    elector = LeaderElector(launcher.client, namespace=NS, name="rngdctl-daemon",
                            identity="b/1", home=store.home_id, clock=Clock(1000.0),
                            wall=Clock())
    assert not elector.lead()
    assert elector.note == (f"the Lease {NS}/rngdctl-daemon is another rngdctl home's "
                            f"({OTHER_HOME}; this home is {store.home_id}): set [k8s] "
                            f"lease_name to one of its own")
    assert cluster.get(LEASES, "rngdctl-daemon")["spec"]["holderIdentity"] == ""


def test_our_lease_carries_this_homes_id(cluster, launcher, store):
    from daemon.launchers.k8s.leader import LeaderElector

    elector = LeaderElector(launcher.client, namespace=NS, name="rngdctl-daemon",
                            identity="a/1", home=store.home_id, clock=Clock(1000.0),
                            wall=Clock())
    assert elector.lead()
    assert jobspec.ours(cluster.get(LEASES, "rngdctl-daemon"), store.home_id)


# === the agents' ConfigMaps =====================================================


@pytest.mark.parametrize("a, b", [
    ("rngd.node-1", "rngd-node-1"),  # one dot apart
    ("rack-1." + "n" * 60 + ".a", "rack-1." + "n" * 60 + ".b"),  # one past 63 characters
])
def test_two_nodes_never_share_an_agent_configmap(a, b):
    assert nodes.configmap_name(a) != nodes.configmap_name(b)
    assert nodes.configmap_name(a) == f"rngdctl-agent-{a}"


def test_a_node_name_too_long_for_the_prefix_gets_a_hashed_configmap_name():
    node = ".".join(["n" * 62] * 4)  # 251 characters: a valid node name, too long with ours
    name = nodes.configmap_name(node)
    assert name.startswith("rngdctl-agent--") and len(name) <= 253
    assert name != nodes.configmap_name(node[:-1] + "m")


# === partitioned cards ==========================================================


def _partitioned_node(cluster, name: str = NODE) -> None:
    cluster.put("v1/nodes", {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "64", PARTITION: "32"}}}, namespace=None)


def test_a_partitioned_node_offers_no_whole_cards_and_says_why(cluster, launcher, submit,
                                                               store):
    _partitioned_node(cluster)
    reading = launcher.cluster_reading(store.run(submit()))
    assert reading.cards_free == 0
    assert reading.cards_detail == (
        f"node {NODE}'s cards are partitioned: 32 {PARTITION} (8 cards); a run's --cards are "
        f"whole cards (furiosa.ai/rngd, furiosa.ai/rngd-s, furiosa.ai/rngd-max): set [k8s] "
        f'card_resource = "{PARTITION}" to count them in that partition unit, or serve whole '
        f"cards on this node")


def test_with_card_resource_a_partitioned_nodes_cards_count_in_partitions(
        cluster, launcher, submit, store, config):
    _partitioned_node(cluster)
    config.k8s.card_resource = PARTITION
    assert launcher.cluster_reading(store.run(submit())).cards_free == 32
    config.k8s.agents = True
    [state] = launcher.node_states()
    assert (state.name, state.cards_free) == (NODE, 32)


def test_with_agents_a_partitioned_node_is_listed_with_its_reason(cluster, launcher, config):
    _partitioned_node(cluster, "rngd-node-9")
    config.k8s.agents = True
    states = {s.name: s for s in launcher.node_states()}
    assert states["rngd-node-9"].cards_free == 0
    assert "cards are partitioned: 32 furiosa.ai/rngd-2core.12gb" in \
        states["rngd-node-9"].cards_detail
