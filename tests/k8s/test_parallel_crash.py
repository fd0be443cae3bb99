"""Runs on two nodes at once, and a daemon SIGKILLed at every fault point of a launch.

A real daemon subprocess with node agents against the emulator (3 nodes, 2
live agents, 1 silent). The first daemon dies at RNGDCTL_FAULT's point on
its first launch; a second one, started at once, recovers and drains the
queue while the test samples the store every 20 ms. At every sample, at
most one of our runs is active per node; two are active at once on two
nodes; at the end each run created one Job (never two trainers for a run)
and stored each step once.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from k8s_emulator import NODE, NS
from k8s_support import IMAGE, end_line, publish_agents, start_line, step_line

from daemon import faults
from daemon.launchers.k8s import jobspec
from daemon.store import Store

REPO = Path(__file__).resolve().parents[2]
NODE2, NODE3 = "rngd-node-2", "rngd-node-3"
STEPS = 3


def _lines(job: dict) -> list[str]:
    run_id = int(job["metadata"]["labels"][jobspec.RUN_LABEL])
    return [start_line(run_id), *(step_line(i) for i in range(1, STEPS + 1)), end_line()]


@pytest.fixture
def agents(cluster, config, tmp_path):
    """Live agents on node-1 and node-2 (tick 60 s: live for the whole test), node-3 silent."""
    cluster.add_node(NODE2, cards=4, images=[IMAGE])
    cluster.add_node(NODE3, cards=4, images=[IMAGE])
    now = time.time()
    publish_agents(config, tmp_path, [(NODE, now), (NODE2, now), (NODE3, now - 3600)], tick=60.0)


def _daemon(cluster, home, fault: str = "") -> subprocess.Popen:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), faults.ENV: fault}
    return subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon", "--launcher",
         "k8s", "--namespace", NS, "--context", "emu", "--tick", "0.1", "--exit-when-idle"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


class Sampler(threading.Thread):
    """Reads the store every 20 ms: the most active runs seen on one node, and at once."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.stop = path, threading.Event()
        self.most_on_a_node = 0
        self.most_at_once = 0
        self.unplaced: list = []  # active runs with no node (the claim always stores one)
        self.samples = 0

    def run(self):
        with Store(self.path, timeout=30) as store:
            while not self.stop.is_set():
                active = store.active_runs()
                per_node = collections.Counter(r["node"] for r in active)
                self.unplaced += [r["id"] for r in active if r["node"] is None]
                self.most_on_a_node = max([self.most_on_a_node, *per_node.values()])
                self.most_at_once = max(self.most_at_once, len(active))
                self.samples += 1
                time.sleep(0.02)


@pytest.mark.parametrize("point", list(faults.POINTS))
def test_a_daemon_killed_at_any_launch_point_keeps_one_run_per_node_one_job_per_run_and_each_step_once(
        point, agents, cluster, home, store, submit):
    home.config_path.write_text(f'[k8s]\nimage = "{IMAGE}"\nagents = true\n')
    runs = [submit(cards=2, steps=STEPS) for _ in range(3)]
    cluster.kmock.autopilot = _lines
    cluster.kmock.autopilot_hold = True  # pods run until the test has seen two at once

    first = _daemon(cluster, home, fault=point)
    try:
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -9, err

    sampler = Sampler(store.path)
    sampler.start()
    second = _daemon(cluster, home)
    try:
        deadline = time.monotonic() + 60
        while sampler.most_at_once < 2 and second.poll() is None:
            assert time.monotonic() < deadline, "two runs were never active at once"
            time.sleep(0.05)
        cluster.call(cluster.kmock.release())
        _, err = second.communicate(timeout=90)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
        sampler.stop.set()
        sampler.join(5)
    assert second.returncode == 0, err

    assert sampler.most_on_a_node == 1 and sampler.unplaced == []
    assert sampler.most_at_once == 2  # node-1 and node-2; node-3's agent is silent
    for run_id in runs:
        run = store.run(run_id)
        assert run["status"] == "done", store.events(run_id=run_id)
        assert run["node"] in (NODE, NODE2)
        assert [s["step"] for s in store.steps(run_id)] == list(range(1, STEPS + 1))
    created = collections.Counter(
        int(r.data["metadata"]["labels"][jobspec.RUN_LABEL]) for r in cluster.requests
        if r.method.value == "POST" and r.resource is not None and r.resource.plural == "jobs")
    assert created == {run_id: 1 for run_id in runs}
