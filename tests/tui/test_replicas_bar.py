"""Under leader election a line under the daemon bar says which replica leads, as `show` does."""

from __future__ import annotations

import time

from textual.geometry import Region
from tui_support import NOW, T0, text_of

from daemon.scheduling import replicas

LEADER, STANDBY = "rngdctl-0/4000", "rngdctl-1/31"  # the recorded daemon row's pid is 4000


def _elect(store, *, leader_heartbeat: float = NOW - 2) -> None:
    store.set_replica(LEADER, role="leader", leader=LEADER, pid=4000, now=leader_heartbeat)
    store.set_replica(STANDBY, role="standby", leader=LEADER, pid=31, now=NOW - 1)


async def test_the_replicas_bar_names_the_leader_since_when_and_this_pods_standby(
        make_app, settle, store, monkeypatch):
    monkeypatch.setenv("POD_NAME", "rngdctl-1")
    _elect(store)
    async with make_app().run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        bar = pilot.app.query_one("#replicas-bar")
        shown = text_of(pilot.app, "#replicas-bar")
        assert bar.display
    since = time.strftime("%H:%M:%S", time.gmtime(T0))  # the daemon row's start (TZ=UTC)
    assert shown == (f"daemon: leader {LEADER} since {since}, standby {STANDBY} (this pod) "
                     "(heartbeat 1 s ago); the standby serves reads and launches nothing until "
                     "the leader's Lease expires")


async def test_the_replicas_bar_turns_to_the_failover_when_the_leader_falls_silent(
        make_app, settle, store):
    _elect(store)
    async with make_app().run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        assert text_of(pilot.app, "#replicas-bar").startswith(f"daemon: leader {LEADER} since")
        _elect(store, leader_heartbeat=NOW - 30)  # killed: its heartbeat stops
        pilot.app.refresh_data()
        await settle(pilot)
        shown = text_of(pilot.app, "#replicas-bar")
        bar = pilot.app.query_one("#replicas-bar")
        [strip] = bar.render_lines(Region(0, 0, bar.size.width, 1))
        text_color = next(seg.style.color for seg in strip if seg.text == "daemon: ")
        colored = [seg.text for seg in strip
                   if seg.style and seg.style.color not in (None, text_color)]
    assert shown.startswith(f"daemon: leader {LEADER} silent (last heartbeat 30 s ago), "
                            f"standby {STANDBY} (heartbeat 1 s ago); the standby takes over")
    assert colored == [f"leader {LEADER} silent"]  # what stands out (in red)


async def test_with_one_local_daemon_there_is_no_replicas_bar(make_app, settle, store):
    assert store.replicas() == []
    async with make_app().run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        assert pilot.app.query_one("#replicas-bar").display is False
        assert not replicas.read(store, 5.0, NOW).elected
