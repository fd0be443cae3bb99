"""The store's launch claim: one run per node (configurable), one claim per run.

The scheduler's gates say the same thing first; these tests show the store
refuses on its own, including two processes claiming at the same instant.
"""

from __future__ import annotations

import subprocess
import sys
import time

from daemon.store import Store

CONFIG = {"cards": 1, "resident": 2, "steps": 10, "model": "tiny-llama"}


def test_a_second_run_on_a_node_is_refused_and_another_node_takes_it(store):
    a, b = store.add_run(CONFIG), store.add_run(CONFIG)
    assert store.claim_for_launch(a, launcher="k8s", node="rngd-node-1")
    assert not store.claim_for_launch(b, launcher="k8s", node="rngd-node-1")
    assert store.run(b)["status"] == "queued"
    assert store.claim_for_launch(b, launcher="k8s", node="rngd-node-2")
    assert [(r["id"], r["node"]) for r in store.active_runs()] == [
        (b, "rngd-node-2"), (a, "rngd-node-1")]


def test_per_node_two_takes_a_second_run_on_the_node_and_refuses_a_third(store):
    a, b, c = (store.add_run(CONFIG) for _ in range(3))
    assert store.claim_for_launch(a, launcher="k8s", node="n1", per_node=2)
    assert store.claim_for_launch(b, launcher="k8s", node="n1", per_node=2)
    assert not store.claim_for_launch(c, launcher="k8s", node="n1", per_node=2)


def test_a_run_is_claimed_once_a_second_claim_of_it_is_refused_anywhere(store):
    a = store.add_run(CONFIG)
    assert store.claim_for_launch(a, launcher="k8s", node="n1", per_node=4)
    assert not store.claim_for_launch(a, launcher="k8s", node="n2", per_node=4)
    run = store.run(a)
    assert (run["status"], run["node"], run["attempts"]) == ("launching", "n1", 1)


def test_an_active_run_on_no_known_node_counts_on_every_node(store):
    a, b, c = (store.add_run(CONFIG) for _ in range(3))
    assert store.claim_for_launch(a, launcher="local")  # node unknown: the whole host
    assert not store.claim_for_launch(b, launcher="k8s", node="n1")
    assert not store.claim_for_launch(b, launcher="k8s", node="n2")
    assert store.claim_for_launch(b, launcher="k8s", node="n1", per_node=2)
    assert not store.claim_for_launch(c, launcher="k8s", node="n1", per_node=2)


def test_a_claim_for_no_node_waits_until_nothing_is_active_anywhere(store):
    a, b = store.add_run(CONFIG), store.add_run(CONFIG)
    assert store.claim_for_launch(a, launcher="k8s", node="n1")
    assert not store.claim_for_launch(b, launcher="local")
    store.finish_run(a, "done")
    assert store.claim_for_launch(b, launcher="local")


_CLAIMER = """
import sys, time
from pathlib import Path
from daemon.store import Store
db, run_id, node, go = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
store = Store(db, timeout=30)
while not go.exists():
    time.sleep(0.001)
print(int(store.claim_for_launch(run_id, launcher="k8s", node=node)))
"""


def test_processes_claiming_at_the_same_instant_get_one_run_per_node(store, tmp_path):
    runs = [store.add_run(CONFIG) for _ in range(8)]
    nodes = ["n1", "n2"] * 4
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIMER, str(store.path), str(r), n,
                               str(go)], stdout=subprocess.PIPE, text=True)
             for r, n in zip(runs, nodes)]
    time.sleep(1.0)  # every claimer is waiting on the file (a late one only loses: fine)
    go.touch()
    won = {}
    for proc, run_id, node in zip(procs, runs, nodes):
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        if out.strip() == "1":
            won.setdefault(node, []).append(run_id)
    assert sorted(won) == ["n1", "n2"] and all(len(v) == 1 for v in won.values()), won
    with Store(store.path) as other:
        active = other.active_runs()
    assert sorted(r["node"] for r in active) == ["n1", "n2"]
