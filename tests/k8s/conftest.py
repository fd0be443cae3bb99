"""Fixtures for the Kubernetes launcher: kmock's emulator over HTTP, the real client."""

from __future__ import annotations

import pytest
from k8s_emulator import NODE, NS, Cluster
from k8s_support import IMAGE, Clock

from daemon.home import Config


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    emu = Cluster(tmp_path)
    emu.add_node(NODE, cards=8, images=[IMAGE])
    monkeypatch.setenv("KUBECONFIG", str(emu.kubeconfig))
    yield emu
    emu.close()


@pytest.fixture
def dead_api(cluster, tmp_path, monkeypatch):
    """KUBECONFIG names a local port that nothing listens on: every call is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(cluster.kubeconfig.read_text().replace(cluster.url,
                                                           f"http://127.0.0.1:{port}"))
    monkeypatch.setenv("KUBECONFIG", str(dead))
    return dead


@pytest.fixture
def config():
    config = Config()
    config.k8s.namespace = NS
    config.k8s.node = NODE
    config.k8s.image = IMAGE
    config.k8s.retries = 2
    config.k8s.retry_backoff = 0.01
    config.k8s.request_timeout = 0.5
    config.k8s.ttl_seconds = 600
    return config


@pytest.fixture
def proc(tmp_path):
    """An empty /proc: no process holds a device unless a test puts one there."""
    path = tmp_path / "proc"
    path.mkdir()
    return path


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def launcher(cluster, home, store, config, proc, clock):
    from daemon.launchers.k8s.launcher import K8sLauncher
    from daemon.run.ingest import Ingest

    k8s = K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                      proc=str(proc), clock=clock)
    yield k8s
    k8s.close()


@pytest.fixture
def submit(store):
    """Queue a run: submit(cards=2, steps=5, ...) -> the run id."""
    from daemon.run.spec import validate

    def add(**options):
        options = {"cards": 2, "resident": 2, "steps": 5, **options}
        return store.add_run(validate(options), name=options.get("name"))

    return add


@pytest.fixture
def daemon(home, store, config, launcher):
    """The real scheduler over the launcher, on an idle host; tick it with ``tick(now=...)``."""
    from daemon.probes.host_reading import HostReading
    from daemon.scheduling.loop import Daemon

    idle = HostReading(time=0, load=(1.0, 1.0, 1.0), holders=(), complete=True)
    launcher.startup()
    return Daemon(home, store, config, launcher, probe=lambda: idle)


@pytest.fixture
def running(cluster, launcher, store, submit):
    """A run the scheduler has claimed and launched: (run id, its Job's name)."""

    def launch(**options):
        run_id = submit(**options)
        assert store.claim_for_launch(run_id, launcher="k8s")
        launcher.launch(store.run(run_id))
        return run_id, store.run(run_id)["job_name"]

    return launch
