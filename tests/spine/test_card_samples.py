"""The daemon's card readings: sampled every card_sample_s, stored with the run that holds
the card, folded per minute like host samples, and the card-health gate that reads them."""

from __future__ import annotations

import os

import pytest
from smi_fakes import card, fake_binding, set_cards

from daemon.gates.rules import ClusterReading
from daemon.probes import smi
from daemon.probes.host_reading import Holder, HostReading
from daemon.scheduling.loop import Daemon
from daemon.store import compaction
from daemon.store.compaction import DAY

NOW = 1_800_000_000.0  # a minute boundary
TRAINER = 4242


class Launcher:
    """Launches at once; its run holds npu1 through the trainer's pid once launched."""

    name = "scripted"

    def __init__(self):
        self.launched: list[int] = []

    def cluster_reading(self, run):
        return ClusterReading()

    def own_pids(self):
        return {TRAINER} if self.launched else set()

    def launch(self, run):
        self.launched.append(run["id"])

    def follow(self, run):
        return None

    def recover(self, run):
        return None

    def startup(self):
        pass

    def close(self):
        pass


@pytest.fixture
def site(tmp_path):
    return fake_binding(tmp_path, [card(0, soc_peak=40.0), card(1, soc_peak=50.0)])


@pytest.fixture
def daemon(home, store, site):
    launcher = Launcher()
    holders = {"now": ()}
    probe = lambda: HostReading(time=0.0, load=(1.0, 1.0, 1.0), holders=holders["now"],
                                complete=True)
    d = Daemon(home, store, home.config(), launcher, probe=probe, clock=lambda: NOW,
               card_reader=smi.CardReader(env={**os.environ, "PYTHONPATH": str(site)}))
    d.holders = holders
    d.start()
    yield d
    d.close()


def _holding(daemon):
    daemon.holders["now"] = (Holder(TRAINER, "kim", "python -m trainer", ("/dev/rngd/npu1pe0",)),)


def test_a_runs_cards_are_stored_every_card_sample_s_with_the_run_that_holds_them(
        daemon, store, site):
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    daemon.tick(now=NOW)  # gates pass, launch; the cards read before the gate, no run yet
    _holding(daemon)
    for i, (temp, power) in enumerate([(55.0, 90.0), (61.5, 120.0), (58.0, 100.0)], 1):
        set_cards(site, [card(0, soc_peak=40.0), card(1, soc_peak=temp, power_w=power)])
        daemon.tick(now=NOW + 10 * i - 5)  # not yet due: no reading
        daemon.tick(now=NOW + 10 * i)
    rows = store.card_samples()
    assert len(rows) == 8  # 2 cards, 4 readings (NOW, +10, +20, +30)
    assert [(r["card"], r["run_id"]) for r in rows if r["time"] == NOW + 10] == [
        ("npu0", None), ("npu1", run)]
    [npu1] = store.card_ranges(run)
    assert (npu1["card"], npu1["readings"], npu1["temp_min"], npu1["temp_max"]) == (
        "npu1", 3, 55.0, 61.5)
    assert (npu1["power_min"], npu1["power_max"], npu1["throttled"]) == (90.0, 120.0, 0)


def test_a_throttling_card_is_counted_with_its_reasons(daemon, store, site):
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    daemon.tick(now=NOW)
    _holding(daemon)
    for i, throttle in enumerate([["Idle"], ["ThermalSlowdown"], ["ThermalSlowdown"]], 1):
        set_cards(site, [card(0), card(1, throttle=throttle)])
        daemon.tick(now=NOW + 10 * i)
    [npu1] = store.card_ranges(run)
    assert (npu1["throttled"], npu1["throttle"]) == (2, ["ThermalSlowdown"])
    assert (npu1["throttled_from"], npu1["throttled_until"]) == (NOW + 20, NOW + 30)


def _gate(store, run_id):
    check = store.gate_checks(run_id=run_id)[-1]
    return next(g for g in check["gates"] if g["name"] == "card_health"), check["passed"]


def test_the_health_gate_names_a_thermally_throttled_card_and_holds_the_run(daemon, store, site):
    set_cards(site, [card(0), card(1, soc_peak=88.0, throttle=["ThermalSlowdown"])])
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    daemon.tick(now=NOW)
    gate, passed = _gate(store, run)
    assert (gate["verdict"], gate["reading"], passed) == ("fail", 1, False)
    assert gate["detail"] == "npu1 throttling: thermal slowdown"
    assert store.run(run)["status"] == "queued"
    set_cards(site, [card(0), card(1, soc_peak=70.0)])
    daemon.tick(now=NOW + 10)  # cooled down: the next reading lets it start
    gate, passed = _gate(store, run)
    assert (gate["verdict"], gate["detail"], passed) == (
        "pass", "2 cards healthy (hottest npu1 70.0 °C)", True)
    assert store.run(run)["status"] != "queued"


def test_a_card_past_max_temp_c_blocks_and_a_dead_one_too(daemon, store, site):
    daemon.config.gates.max_temp_c = 80.0
    set_cards(site, [card(0, alive=False), card(1, soc_peak=81.5)])
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    daemon.tick(now=NOW)
    gate, _ = _gate(store, run)
    assert gate["detail"] == "npu0 not alive; npu1 soc_peak 81.5 °C > max_temp_c 80"


def test_without_furiosa_smi_the_health_gate_is_informational(home, store):
    # The real binding with no card on this machine: n/a, with its one line.
    d = Daemon(home, store, home.config(), Launcher(), clock=lambda: NOW,
               probe=lambda: HostReading(time=0.0, load=(1.0, 1.0, 1.0), holders=(),
                                         complete=True))
    d.start()
    try:
        run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
        d.tick(now=NOW)
    finally:
        d.close()
    gate, passed = _gate(store, run)
    if gate["detail"].startswith("no RNGD card found") or "not installed" in gate["detail"]:
        assert (gate["verdict"], passed) == ("n/a", True)
    else:
        pytest.skip(f"this machine has cards: {gate['detail']}")


def test_old_card_readings_fold_per_minute_and_the_run_ranges_read_the_same(store):
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    old = NOW - 40 * DAY
    for i, (temp, util, throttle) in enumerate([(50.0, 0.2, []), (70.0, 0.6, ["HwPowerCap"]),
                                                (60.0, 0.4, []), (65.0, 0.8, [])]):
        store.add_card_samples([{"run_id": run, "card": "npu1", "uuid": "u1", "alive": True,
                                 "temp_c": temp, "power_w": 100.0 + i, "util": util,
                                 "memory_used": i << 30, "cores_occupied": 2,
                                 "throttle": throttle, "throttled": bool(throttle)}],
                               now=old + 15 * i)
    before = store.card_ranges(run)
    folded, more = store.compact_card_samples(NOW - 30 * DAY, compaction.BATCH)
    assert (folded, more) == (4, False)
    [row] = store.card_samples()
    assert (row["n"], row["temp_c"], row["temp_min"], row["temp_max"]) == (4, 61.25, 50.0, 70.0)
    assert (row["util"], row["memory_used"], row["throttle"], row["throttled"]) == (
        pytest.approx(0.5), 3 << 30, ["HwPowerCap"], 1)
    after = store.card_ranges(run)
    for key in ("readings", "temp_min", "temp_max", "power_min", "power_max", "util_min",
                "util_max", "throttled", "throttle"):
        assert after[0][key] == before[0][key], key
