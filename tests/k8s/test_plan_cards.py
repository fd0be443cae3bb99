"""`rngdctl plan` on the k8s launcher: rows up to the node's allocatable cards, free = the gate's."""

from __future__ import annotations

from daemon.scheduling import plan


def test_the_plan_counts_the_nodes_allocatable_cards_and_the_ones_free_now(cluster, launcher):
    cluster.add_pod("serving", cards=3, namespace="inference")

    capacity = plan.k8s_capacity(launcher, host_gb=plan.memory_quantity_gb("64Gi"))

    assert (capacity.cards, capacity.free) == (8, 5)
    assert "8 allocatable, 3 requested" in capacity.rule
    assert capacity.host_gb == 64 * 2**30 / 1e9


def test_memory_quantities_read_as_kubernetes_writes_them():
    assert plan.memory_quantity_gb("500M") == 0.5
    assert plan.memory_quantity_gb("2Gi") == 2 * 2**30 / 1e9
    assert plan.memory_quantity_gb(None) is None
    assert plan.memory_quantity_gb("lots") is None
