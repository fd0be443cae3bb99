"""Which daemon replica leads, as `show`, `show --json` and `runs` print it
(daemon/scheduling/replicas.py).

The rows are what replicas write under leader election (tests/k8s/test_leader.py and
test_two_daemons.py run real ones); here they are stored directly, at known times.
"""

from __future__ import annotations

import json
import re
import time

from daemon.scheduling import replicas

T0 = 1_767_225_600.0
TICK = 5.0


def _rows(*rows):
    """(identity, role, heartbeat, the holder it saw) -> Store.replicas()-like rows."""
    return [{"identity": i, "role": role, "pid": int(i.rsplit("/", 1)[1]), "heartbeat": hb,
             "leader": sees} for i, role, hb, sees in rows]


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def test_the_leader_its_start_and_each_standbys_heartbeat_make_one_line():
    rows = _rows(("rngdctl-0/7", "leader", T0 + 99, "rngdctl-0/7"),
                 ("rngdctl-1/8", "standby", T0 + 97, "rngdctl-0/7"))
    daemon_row = {"pid": 7, "started": T0 + 2, "stopped": None}
    view = replicas.from_rows(rows, daemon_row, TICK, now=T0 + 100, host="rngdctl-0")
    assert view.elected and view.leader_since == T0 + 2
    assert view.line() == (
        f"daemon: leader rngdctl-0/7 (this pod) since {_clock(T0 + 2)}, standby rngdctl-1/8 "
        "(heartbeat 3 s ago); the standby serves reads and launches nothing until the "
        "leader's Lease expires")


def test_a_leader_without_a_standby_says_so():
    rows = _rows(("rngdctl-0/7", "leader", T0 + 99, "rngdctl-0/7"))
    view = replicas.from_rows(rows, None, TICK, now=T0 + 100, host="elsewhere")
    assert view.line() == "daemon: leader rngdctl-0/7, no standby"


def test_during_a_failover_the_silent_leader_and_the_standby_about_to_take_over_are_named():
    # The leader was killed 20 s ago; the standby still sees it hold the Lease.
    rows = _rows(("rngdctl-0/7", "leader", T0 + 80, "rngdctl-0/7"),
                 ("rngdctl-1/8", "standby", T0 + 100, "rngdctl-0/7"))
    daemon_row = {"pid": 7, "started": T0, "stopped": None}
    view = replicas.from_rows(rows, daemon_row, TICK, now=T0 + 100, host="rngdctl-1")
    assert not view.leader.live and view.leader_since is None
    assert view.line() == (
        "daemon: leader rngdctl-0/7 silent (last heartbeat 20 s ago), standby rngdctl-1/8 "
        "(this pod) (heartbeat 0 s ago); the standby takes over once the Lease is released "
        "or expires")


def test_the_row_a_long_gone_pod_left_is_not_shown_as_the_leader():
    # rngdctl-0 was killed a day ago; rngdctl-2 led since and stopped cleanly (its row
    # dropped, the Lease handed back): the standby sees no holder.
    rows = _rows(("rngdctl-0/7", "leader", T0 - 86_400, "rngdctl-0/7"),
                 ("rngdctl-1/8", "standby", T0 + 99, None))
    view = replicas.from_rows(rows, None, TICK, now=T0 + 100, host="x")
    assert view.leader is None
    assert view.line() == ("daemon: no leader, standby rngdctl-1/8 (heartbeat 1 s ago); the "
                           "standby takes over once the Lease is released or expires")


def test_without_leader_election_there_is_no_line():
    assert replicas.from_rows([], {"pid": 7, "started": T0, "stopped": None}, TICK,
                              now=T0).line() is None
    # Every replica silent (the Deployment scaled to 0): liveness says no daemon runs.
    rows = _rows(("rngdctl-0/7", "leader", T0, "rngdctl-0/7"),
                 ("rngdctl-1/8", "standby", T0, "rngdctl-0/7"))
    assert not replicas.from_rows(rows, None, TICK, now=T0 + 600).elected


def _leader_and_standby(home, store, now):
    store.daemon_started(pid=11, launcher="k8s", home=str(home.path), now=now - 60)
    store.set_replica("rngdctl-0/11", role="leader", leader="rngdctl-0/11", pid=11, now=now)
    store.set_replica("rngdctl-1/12", role="standby", leader="rngdctl-0/11", pid=12, now=now)


def test_show_names_the_leader_since_when_and_the_standby_beside_which_it_runs(
        home, store, rngdctl):
    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    now = time.time()
    _leader_and_standby(home, store, now)
    code, out, err = rngdctl("show", str(run), env={"POD_NAME": "rngdctl-1"})
    assert code == 0, err
    line = out.splitlines()[1]
    assert re.fullmatch(
        rf"  daemon: leader rngdctl-0/11 since (\S+ )?{_clock(now - 60)}, standby rngdctl-1/12 "
        r"\(this pod\) \(heartbeat \d+ s ago\); the standby serves reads and launches nothing "
        r"until the leader's Lease expires", line), out


def test_show_json_gives_the_replicas_as_data(home, store, rngdctl):
    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    now = time.time()
    _leader_and_standby(home, store, now)
    code, out, err = rngdctl("show", str(run), "--json", env={"POD_NAME": "rngdctl-1"})
    assert code == 0, err
    got = json.loads(out)["replicas"]
    assert got["elected"] and got["leader_since"] == now - 60
    assert (got["leader"]["identity"], got["leader"]["live"], got["leader"]["this_pod"]) == (
        "rngdctl-0/11", True, False)
    [standby] = got["standbys"]
    assert (standby["identity"], standby["this_pod"], standby["sees"]) == (
        "rngdctl-1/12", True, "rngdctl-0/11")
    assert got["text"].startswith("daemon: leader rngdctl-0/11 since ")


def test_show_of_a_local_daemon_prints_no_replicas_line(home, store, rngdctl):
    import os

    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    store.daemon_started(pid=os.getpid(), launcher="local", home=str(home.path))
    code, out, _ = rngdctl("show", str(run))
    assert code == 0 and "daemon:" not in out and "standby" not in out
    _, out, _ = rngdctl("show", str(run), "--json")
    assert json.loads(out)["replicas"] == {"elected": False, "leader": None,
                                           "leader_since": None, "standbys": [], "text": None}
