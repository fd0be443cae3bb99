"""Helpers the Kubernetes launcher's tests share: the image, a fake clock, trainer lines.

A module of its own (not conftest.py): ``from conftest import ...`` picks up
whichever test folder's conftest was imported last when folders run together.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

IMAGE = "registry.example/furiosa-llm:2026.1"


class Clock:
    """A fake clock for the launcher: ``clock.now += 30`` moves it on."""

    def __init__(self, now: float = 1_767_225_600.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def tick_until_launched(daemon, store, run_id: int, now: int) -> int:
    """Tick until the run is launched (gates pass 2 ticks in a row); the next tick's time."""
    for tick in range(now, now + 5):
        if daemon.tick(now=tick).launched == run_id:
            return tick + 1
    raise AssertionError(f"run {run_id} was not launched: {store.events(run_id=run_id)}")


def job_of(store, run_id: int, attempt: int, stage: str = "train") -> str:
    """The name of the Job of a run's attempt, as the launcher of ``store``'s home names it."""
    from daemon.launchers.k8s import jobspec

    return jobspec.job_name({"id": run_id, "attempts": attempt}, stage, home=store.home_id)


def pulled_before(store, image: str) -> None:
    """The store remembers a pre-pull pod of ours that pulled ``image`` (daemon/launchers/retry.py's
    evidence that a later failed pull of it is worth a retry)."""
    store.add_event(None, "prepull", f"{image} pulled onto rngd-node-1 by an earlier pod",
                    now=1.0, data={"pulled": image, "node": "rngd-node-1"})


def start_line(run_id: int, label: str = "main") -> str:
    from trainer import records

    return records.dumps(records.Start(config_label=label, config={"cards": 2},
                                       run_id=str(run_id), versions={"torch": "2.13.0"},
                                       git="abc123", host="pod", time=1000.0))


def step_line(step: int, loss: float = 2.0, label: str = "main") -> str:
    from trainer import records

    return records.dumps(records.Step(config_label=label, step=step, loss=loss, step_s=1.5,
                                      tokens=1024, lr=1e-5, time=1000.0 + step))


def end_line(status: str = "ok", error: str | None = None) -> str:
    from trainer import records

    return records.dumps(records.End(status=status, error=error, time=2000.0))


def device_holder(proc, pid: int, cgroup: str | None) -> None:
    """A process in the fake /proc that holds an RNGD device file (no cgroup file: None)."""
    d = proc / str(pid)
    (d / "fd").mkdir(parents=True)
    os.symlink("/dev/rngd/npu0pe0", d / "fd" / "3")
    (d / "cmdline").write_bytes(b"python\0serve.py\0")
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)


def publish_agents(config, tmp_path, heartbeats, tick: float = 5.0) -> None:
    """Each node's rngdctl agent publishes once, at its time: [(node, heartbeat), ...].

    The agents read an empty /proc of their own (no holder) and no furiosa-smi.
    """
    from daemon.launchers.k8s.agent import Agent
    from daemon.launchers.k8s.client import K8sClient

    for node, at in heartbeats:
        proc = tmp_path / f"proc-{node}"
        proc.mkdir(exist_ok=True)
        client, _ = K8sClient.from_config(config.k8s)
        try:
            Agent(client, namespace=config.k8s.agent_namespace, node=node, tick=tick,
                  proc=str(proc),
                  read_cards=lambda: ([], "furiosa-smi not found: no card readings")
                  ).publish(now=at)
        finally:
            client.close()


class DaemonProcesses:
    """``rngdctl daemon --launcher k8s --exit-when-idle`` replicas on one home, each a process
    with its own pod name (POD_NAME), its env from ``env_of(pod)`` and ``argv`` added; each
    one's stderr in a file (a pipe could fill up)."""

    def __init__(self, home, pods, tmp_path, env_of, argv=()):
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = {pod: tmp_path / f"{pod}.log" for pod in pods}
        repo = Path(__file__).resolve().parents[2]
        for pod in pods:
            env = {**os.environ, "POD_NAME": pod, **env_of(pod)}
            with self.logs[pod].open("w") as log:
                self.procs[pod] = subprocess.Popen(
                    [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon",
                     "--launcher", "k8s", *argv, "--exit-when-idle"],
                    cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=log)

    def log(self, pod: str) -> str:
        return self.logs[pod].read_text()[-3000:]

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
