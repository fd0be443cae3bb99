"""Leader election: two daemon replicas on one home, one Lease; only its holder launches.

Each replica is a real ``Daemon`` with its own ``K8sLauncher``, client and store
connection, against kmock's emulator over HTTP (which refuses a stale
resourceVersion with 409, as the API server does). Each has its own fake
monotonic clock, as two pods would.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import pytest
from k8s_emulator import LEASES, NS
from k8s_support import Clock, tick_until_launched

from daemon.launchers.k8s.client import K8sConflict
from daemon.launchers.k8s.launcher import K8sLauncher
from daemon.launchers.k8s.leader import LeaderElector
from daemon.probes.host_reading import HostReading
from daemon.run.ingest import Ingest
from daemon.scheduling import liveness, replicas
from daemon.scheduling.loop import Daemon

LEASE = "rngdctl-daemon"
T0 = 1_767_225_600
IDLE = HostReading(time=0, load=(1.0, 1.0, 1.0), holders=(), complete=True)


@dataclass
class Replica:
    daemon: Daemon
    clock: Clock  # this replica's own monotonic clock
    elector: LeaderElector

    def tick(self, now: float):
        return self.daemon.tick(now=now)


@pytest.fixture
def replica(cluster, home, config, proc, clock):
    made = []

    def make(name: str) -> Replica:
        store = home.store()
        launcher = K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                               proc=str(proc), clock=clock)
        mono = Clock(1000.0)
        elector = LeaderElector(launcher.client, namespace=NS, name=LEASE,
                                identity=f"{name}/1", home=store.home_id, lease_duration=15.0,
                                renew_deadline=10.0, clock=mono, wall=clock)
        daemon = Daemon(home, store, config, launcher, probe=lambda: IDLE, leader=elector)
        daemon.start()
        made.append((daemon, store))
        return Replica(daemon, mono, elector)

    yield make
    for daemon, store in made:
        daemon.close()
        store.close()


def _jobs(cluster) -> list[str]:
    return cluster.names("batch/v1/jobs")


def test_of_two_daemons_only_the_lease_holder_launches_and_the_standby_says_so(
        replica, cluster, store, submit):
    a, b = replica("a"), replica("b")
    run_id = submit()
    for t in range(4):
        assert not a.tick(T0 + t).standby
        assert b.tick(T0 + t).standby
    assert store.run(run_id)["status"] == "running"
    assert _jobs(cluster) == [store.run(run_id)["job_name"]]
    assert cluster.get(LEASES, LEASE)["spec"]["holderIdentity"] == "a/1"
    # The standby only reads the Lease; it wrote nothing to the API.
    assert set(b.daemon.launcher.client.calls) == {"read_lease"}
    assert {r["identity"]: r["role"] for r in store.replicas()} == {"a/1": "leader",
                                                                    "b/1": "standby"}
    line = replicas.read(store, 5.0, now=T0 + 4, host="b").line()
    assert line.startswith("daemon: leader a/1 since ")
    assert ", standby b/1 (this pod) (heartbeat 1 s ago); the standby serves reads" in line


def test_the_standby_takes_over_when_the_leader_stops_renewing(replica, cluster, store,
                                                               submit):
    a, b = replica("a"), replica("b")
    a.tick(T0)
    b.tick(T0)  # b observes a's record now, by its own clock
    # a dies without a word: its renewals stop, and the kernel drops its flock on the home.
    a.daemon._lock.release()
    b.clock.now += 14
    assert b.tick(T0 + 14).standby, "took the Lease before it expired"
    b.clock.now += 2
    assert not b.tick(T0 + 16).standby
    lease = cluster.get(LEASES, LEASE)["spec"]
    assert lease["holderIdentity"] == "b/1" and lease["leaseTransitions"] == 1
    run_id = submit()
    tick_until_launched(b.daemon, store, run_id, T0 + 17)
    assert _jobs(cluster) == [store.run(run_id)["job_name"]]
    assert any(e["message"] == f"b/1 leads (Lease {NS}/{LEASE})" for e in store.events())
    # a was only stalled, not dead: back, it sees b hold the Lease and stops.
    a.clock.now += 30
    assert a.tick(T0 + 30).standby
    assert a.daemon.stop_reason == f"lost the Lease {NS}/{LEASE}: b/1 holds the Lease {NS}/{LEASE}"
    assert _jobs(cluster) == [store.run(run_id)["job_name"]]


def test_a_leader_that_loses_its_lease_mid_tick_does_not_launch(replica, cluster, store,
                                                                submit):
    a = replica("a")
    run_id = submit()
    assert not a.tick(T0).standby  # leads; the gates pass once of the 2 times in a row needed
    assert store.gate_checks(run_id=run_id)[-1]["passed"]

    def probe_then_lose_the_lease():
        # While this tick runs, another replica writes the Lease (say a's renewals were
        # slow to arrive and it judged the Lease expired).
        cluster.replace_lease(LEASE, {"holderIdentity": "thief/9"})
        return IDLE

    a.daemon.probe = probe_then_lose_the_lease
    result = a.tick(T0 + 1)
    assert result.gates_passed and result.launched is None
    assert store.run(run_id)["status"] == "queued" and _jobs(cluster) == []
    [event] = [e for e in store.events(run_id=run_id) if e["kind"] == "leader"]
    assert event["message"] == (f"not launched: another replica wrote the Lease {NS}/{LEASE} "
                                f"first (409)")
    a.daemon.probe = lambda: IDLE
    assert a.tick(T0 + 2).standby
    assert a.daemon.stop_reason.startswith(f"lost the Lease {NS}/{LEASE}: thief/9 holds")
    assert store.run(run_id)["status"] == "queued" and _jobs(cluster) == []


def test_a_leader_that_stops_cleanly_hands_the_lease_over_at_once(replica, cluster, store):
    a, b = replica("a"), replica("b")
    a.tick(T0)
    assert b.tick(T0).standby
    a.daemon.stop("SIGTERM")
    a.daemon.close()
    assert cluster.get(LEASES, LEASE)["spec"]["holderIdentity"] == ""
    assert not b.tick(T0 + 1).standby  # no wait for the 15 s lease duration
    assert store.daemon_state()["stopped"] is None  # the row is b's now
    assert [r["identity"] for r in store.replicas()] == ["b/1"]


def test_a_stale_resource_version_is_refused_with_409_by_the_emulator(cluster, config):
    from daemon.launchers.k8s.client import K8sClient

    client, _ = K8sClient.from_config(config.k8s)
    try:
        client.create_lease(NS, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                 "metadata": {"name": "x", "namespace": NS},
                                 "spec": {"holderIdentity": "a"}})
        seen = client.read_lease(NS, "x")
        cluster.replace_lease("x", {"holderIdentity": "b"})
        seen["spec"]["holderIdentity"] = "a"
        with pytest.raises(K8sConflict):
            client.replace_lease(NS, "x", seen)
        assert client.read_lease(NS, "x")["spec"]["holderIdentity"] == "b"
        with pytest.raises(K8sConflict):
            client.create_lease(NS, seen)
    finally:
        client.close()


def test_runs_names_the_replicas_and_the_standby(rngdctl, store):
    now = time.time()
    store.set_replica("rngdctl-daemon-7f-aaaaa/1", role="leader", leader="rngdctl-daemon-7f-aaaaa/1",
                      pid=1, now=now)
    store.set_replica("rngdctl-daemon-7f-bbbbb/1", role="standby",
                      leader="rngdctl-daemon-7f-aaaaa/1", pid=1, now=now)
    code, out, err = rngdctl("runs")
    assert code == 0, err
    assert re.search(r"^daemon: leader rngdctl-daemon-7f-aaaaa/1, standby "
                     r"rngdctl-daemon-7f-bbbbb/1 \(heartbeat \d+ s ago\); the standby serves "
                     r"reads and launches nothing", out, re.MULTILINE), out


@pytest.mark.parametrize("config_text, message", [
    ('[daemon]\nlauncher = "local"\n[k8s]\nleader_election = true\n',
     "[k8s] leader_election needs the k8s launcher"),
    ('[k8s]\nlease_duration = 10.0\nrenew_deadline = 10.0\n',
     "[k8s] renew_deadline (10.0) must be above 0 and below lease_duration (10.0)"),
])
def test_a_leader_election_setting_that_cannot_work_is_one_line_and_exit_2(
        rngdctl, home, config_text, message):
    home.config_path.write_text(config_text)
    code, _, err = rngdctl("daemon", "--exit-when-idle")
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_beside_a_standby_the_leader_in_another_pod_reads_as_alive(home, store):
    # The leader's pid lives in its own pod's PID namespace: probing it here means nothing.
    now = time.time()
    store.daemon_started(pid=2 ** 22 + 1, launcher="k8s", home=str(home.path), now=now)
    assert liveness.for_home(home, store, now).state == liveness.DOWN  # one pod: the pid is gone
    store.set_replica("rngdctl-daemon-7f-aaaaa/1", role="leader",
                      leader="rngdctl-daemon-7f-aaaaa/1", pid=1, now=now)
    assert liveness.for_home(home, store, now).state == liveness.ALIVE


def test_a_leader_whose_renewals_fail_leads_until_the_renew_deadline_then_stops(
        replica, cluster, store):
    a = replica("a")
    assert not a.tick(T0).standby
    cluster.fail("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}",
                 times=100, payload=500)
    a.clock.now += 5
    assert not a.tick(T0 + 5).standby  # its renewal fails; 5 s is within the 10 s deadline
    a.clock.now += 6
    assert a.tick(T0 + 11).standby  # 11 s since its last write: it must not act any more
    assert a.daemon.stop_reason.startswith(f"lost the Lease {NS}/{LEASE}: cannot write the "
                                           f"Lease {NS}/{LEASE}: replace_lease: no answer")


def test_a_leader_restarted_under_its_own_identity_takes_its_unexpired_lease_back_at_once(
        replica, cluster):
    # A daemon container restarted in its pod is "<pod>/1" again (design.md, failover).
    a, b = replica("a"), replica("b")
    assert not a.tick(T0).standby
    assert b.tick(T0).standby
    a.daemon._lock.release()  # the old process is gone with its container
    again = replica("a")
    assert not again.tick(T0 + 1).standby  # no wait for the 15 s lease duration
    assert cluster.get(LEASES, LEASE)["spec"]["leaseTransitions"] == 0
    b.clock.now += 20
    assert b.tick(T0 + 20).standby  # the record changed since b saw it: not expired


# === the Lease's timing against the tick =========================================


def test_a_tick_too_long_for_the_lease_is_refused_where_the_config_is_read():
    from daemon.errors import ConfigError
    from daemon.home import parse_config

    with pytest.raises(ConfigError) as refused:
        parse_config("[daemon]\ntick = 20.0\n[k8s]\nleader_election = true\n",
                     where="/h/config.toml")
    assert str(refused.value) == (
        "/h/config.toml: [k8s] renew_deadline (10 s) must be at least 2 ticks ([daemon] tick "
        "= 20 s) with leader_election: the leader renews the Lease once a tick; raise "
        "renew_deadline and lease_duration, or shorten the tick")
    assert parse_config("[daemon]\ntick = 20.0\n")  # one daemon: no Lease to renew


def test_a_tick_flag_too_long_for_the_lease_stops_the_daemon_in_one_line(home, rngdctl,
                                                                         cluster):
    home.config_path.write_text("[k8s]\nleader_election = true\n")
    code, _, err = rngdctl("daemon", "--launcher", "k8s", "--context", "emu", "--tick", "6",
                           env={"KUBECONFIG": str(cluster.kubeconfig)})
    assert code == 2
    assert err.strip().splitlines()[-1].endswith(
        "[k8s] renew_deadline (10 s) must be at least 2 ticks ([daemon] tick = 6 s) with "
        "leader_election: the leader renews the Lease once a tick; raise renew_deadline and "
        "lease_duration, or shorten the tick")
