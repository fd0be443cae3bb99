"""Card readings from furiosa-smi 2026.4's Python binding, in a child process: the real
package for the no-card and not-installed paths and for every name the reader uses, a
stand-in with the real classes' names for the values, hangs and crashes, and the real
binding reading synthetic cards where a user namespace can be made."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import json
import math
import os
import subprocess
import sys
import time

import pytest
from smi_fakes import card, fake_binding, set_cards
from smi_sysfs import FakeCard, FakeSysfs, namespaces_usable

from daemon.probes import smi

real = pytest.importorskip("furiosa_smi", reason="furiosa-smi is not installed (make installs "
                                                 "the smi extra)")


def _env(site) -> dict:
    return {**os.environ, "PYTHONPATH": str(site)}


# === the real 2026.4.0 package ===============================================


def test_the_installed_binding_is_the_release_the_reader_is_written_for():
    assert real.__version__ == smi.RELEASE


def test_without_a_card_the_real_binding_is_one_line_naming_its_own_error():
    if real.list_devices():
        pytest.skip("this machine has an RNGD card")
    reading = smi.CardReader().read()
    assert reading.cards == ()
    assert reading.why == ("no RNGD card found by furiosa-smi 2026.4.0 (DeviceNotFoundError: "
                           "device not found: no available device to read driver version)")


def test_without_the_package_the_line_says_how_to_install_it():
    # -S: no site-packages, so the child cannot import the installed binding.
    reading = smi.CardReader(python=[sys.executable, "-S"]).read()
    assert reading.cards == () and "\n" not in reading.why
    assert reading.why.startswith("furiosa-smi is not installed (ModuleNotFoundError: ")
    assert reading.why.endswith("pip install furiosa-smi (rngdctl's extra: "
                                "pip install 'rngdctl[smi]')")


def test_the_child_finds_the_binding_where_this_process_would(tmp_path, monkeypatch):
    # The child starts without site (-S, issue 27's start-up) and takes this process's
    # path: a stand-in put ahead of the installed binding there, and named nowhere else
    # (no PYTHONPATH), is the one it reads.
    binding = fake_binding(tmp_path, [card(0), card(1)])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.syspath_prepend(str(binding))
    found = importlib.machinery.PathFinder.find_spec("furiosa_smi", sys.path)
    assert found.origin.startswith(str(binding))  # this process would import the stand-in

    reading = smi.CardReader().read()

    assert (reading.why, [c["uuid"] for c in reading.cards]) == (None, ["f1d0-0000", "f1d0-0001"])


@pytest.mark.parametrize("owner, names", smi.READINGS.items())
def test_every_name_the_reader_uses_exists_on_the_real_module(owner, names):
    target = real if owner == "furiosa_smi" else getattr(real, owner)
    assert [n for n in names if not hasattr(target, n)] == []


def _stand_in(tmp_path):
    site = fake_binding(tmp_path)
    spec = importlib.util.spec_from_file_location("furiosa_smi_stand_in",
                                                  site / "furiosa_smi" / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _public(cls) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_the_stand_in_has_only_names_the_real_classes_have_and_every_name_read(tmp_path):
    fake = _stand_in(tmp_path)
    classes = {n: c for n, c in vars(fake).items()
               if inspect.isclass(c) and c.__module__ == fake.__name__ and not n.startswith("_")}
    assert set(classes) <= set(real.__all__)
    for name, cls in classes.items():
        assert _public(cls) <= _public(getattr(real, name)), name
    for owner, names in smi.READINGS.items():
        target = fake if owner == "furiosa_smi" else classes[owner]
        assert [n for n in names if not hasattr(target, n)] == [], owner


def test_the_stand_in_calls_what_the_real_module_calls_and_keeps_what_it_keeps(tmp_path):
    fake = _stand_in(tmp_path)
    device = fake.Device(0, card(0))
    for name in smi.READINGS["Device"]:
        # A reading is a method on both, never a property.
        assert callable(getattr(real.Device, name)) and callable(getattr(device, name))
    for name in smi.THROTTLE_REASONS:
        assert isinstance(getattr(real.ThrottleReason, name), real.ThrottleReason)
        assert isinstance(getattr(fake.ThrottleReason, name), fake.ThrottleReason)


# === values, through the stand-in ============================================


def test_the_childs_line_carries_any_text_and_any_float_the_binding_gives(tmp_path):
    # The child writes its JSON line itself (no json module: its import of re doubled the
    # child's start-up): quotes, backslashes, control characters, any Unicode, NaN, inf.
    odd = 'npu "0" \\ tab\t nul\x00 é 温度 𝄞'
    site = fake_binding(tmp_path, [card(0, uuid=odd, soc_peak=float("nan"),
                                        ambient=float("-inf"), power_w=-0.0,
                                        fail={"firmware_version": odd})])
    [npu0] = smi.CardReader(env=_env(site)).read().cards

    assert (npu0["uuid"], npu0["errors"]) == (odd, {"firmware": f"IoError: {odd}"})
    assert math.isnan(npu0["temp_c"]) and npu0["ambient_c"] == -math.inf
    assert str(npu0["power_w"]) == "-0.0"


def test_each_cards_readings_come_from_the_binding_in_a_child_process(tmp_path):
    site = fake_binding(tmp_path, [
        card(0, soc_peak=48.25, ambient=33.5, power_w=61.0, power_limit_mw=180000,
             occupied=[0, 1], used_bytes=2 << 30, throttle=["Idle"]),
        card(1, alive=False, throttle=["ThermalSlowdown", "HwPowerCap"])])
    reading = smi.CardReader(env=_env(site)).read()
    assert (reading.why, reading.version, reading.driver) == (None, "2026.4.0", "2026.4.0")
    npu0, npu1 = reading.cards
    assert (npu0["card"], npu0["uuid"], npu0["firmware"], npu0["alive"]) == (
        "npu0", "f1d0-0000", "2026.4.0, 4dfed1852e7b", True)
    assert (npu0["temp_c"], npu0["ambient_c"], npu0["power_w"], npu0["power_limit_w"]) == (
        48.25, 33.5, 61.0, 180.0)
    assert (npu0["memory_used"], npu0["memory_total"]) == (4 << 30, 8 * 6375342080)
    assert (npu0["cores_occupied"], npu0["cores"], npu0["throttle"]) == ([0, 1], 8, ["Idle"])
    assert npu0["util"] is None  # a first reading has nothing to measure since
    assert (npu1["alive"], npu1["throttle"]) == (False, ["ThermalSlowdown", "HwPowerCap"])


def test_utilization_is_each_cores_share_of_busy_cycles_since_the_last_reading(tmp_path):
    site = fake_binding(tmp_path, [card(0, counters={"0": [1000, 100], "1": [1000, 0]})])
    reader = smi.CardReader(env=_env(site))
    reader.read()
    # Core 0 busy 3 cycles in 4, core 1 busy 1 in 4, the other six idle: (0.75 + 0.25) / 8.
    set_cards(site, [card(0, counters={"0": [5000, 3100], "1": [5000, 1000]})])
    assert reader.read().cards[0]["util"] == pytest.approx(0.125)


def test_a_reading_that_fails_on_a_card_leaves_that_value_empty_and_names_the_error(tmp_path):
    site = fake_binding(tmp_path, [card(0, fail={"memory_usage": "io error: alloc_status"})])
    [npu0] = smi.CardReader(env=_env(site)).read().cards
    assert (npu0["memory_used"], npu0["memory_total"]) == (None, None)
    assert npu0["errors"] == {"memory": "IoError: io error: alloc_status"}
    assert npu0["temp_c"] == 41.5  # the card's other readings stand


def test_a_binding_that_hangs_costs_one_timeout_and_one_line(tmp_path):
    site = fake_binding(tmp_path, hang=True)
    start = time.monotonic()
    reading = smi.CardReader(env=_env(site), timeout=1.5).read()
    assert time.monotonic() - start < 5
    assert reading.cards == () and reading.failed
    assert reading.why == ("furiosa_smi gave no reading within 1.5 s (the binding hung, in the "
                           "driver?): no card readings")


def test_a_binding_that_crashes_is_one_line_naming_the_signal(tmp_path):
    site = fake_binding(tmp_path, crash=True)
    reading = smi.CardReader(env=_env(site)).read()
    assert reading.why == "furiosa_smi crashed (killed by SIGABRT): no card readings"


# === health ==================================================================


def test_a_card_is_unhealthy_when_dead_hardware_throttled_or_too_hot():
    cards = [{"card": "npu0", "alive": True, "temp_c": 60.0, "throttle": ["Idle", "AppPowerCap"]},
             {"card": "npu1", "alive": False, "temp_c": 50.0, "throttle": []},
             {"card": "npu2", "alive": True, "temp_c": 91.0, "throttle": ["ThermalSlowdown"]}]
    found = smi.health(cards, max_temp_c=85.0)
    assert found.unhealthy == {
        "npu1": ["not alive"],
        "npu2": ["throttling: thermal slowdown", "soc_peak 91.0 °C > max_temp_c 85"]}
    assert found.detail() == ("npu1 not alive; npu2 throttling: thermal slowdown, "
                              "soc_peak 91.0 °C > max_temp_c 85")
    assert smi.health(cards[:1], 85.0).detail("node-1") == (
        "node-1: 1 card healthy (hottest npu0 60.0 °C)")


# === the real binding on synthetic cards =====================================


@pytest.fixture
def sysfs(tmp_path):
    why = namespaces_usable(tmp_path)
    if why:
        pytest.skip(why)
    return FakeSysfs(tmp_path / "sysfs", [
        FakeCard("5a1e-0", "RNGD0001", soc_peak_c=52.5, ambient_c=31.0, power_w=88.25,
                 power_limit_w=150.0, occupied=(2, 3), used_bytes=3 << 30,
                 counters={2: (4000, 1000), 3: (4000, 4000)}),
        FakeCard("5a1e-1", "RNGD0002", alive=False, throttle=("ThermalSlowdown",))])


def test_the_real_binding_reads_synthetic_cards_into_the_same_fields(sysfs):
    reader = smi.CardReader(prefix=sysfs.prefix())
    reading = reader.read()
    assert (reading.why, reading.driver) == (None, "2026.4.0")
    npu0, npu1 = reading.cards
    assert (npu0["card"], npu0["uuid"], npu0["serial"], npu0["alive"]) == (
        "npu0", "5a1e-0", "RNGD0001", True)
    assert (npu0["temp_c"], npu0["ambient_c"], npu0["power_w"], npu0["power_limit_w"]) == (
        52.5, 31.0, 88.25, 150.0)
    assert (npu0["memory_used"], npu0["cores_occupied"], npu0["errors"]) == (6 << 30, [2, 3], {})
    assert (npu1["alive"], npu1["throttle"], npu1["memory_used"]) == (
        False, ["ThermalSlowdown"], 0)
    sysfs.cards[0].counters = {2: (8000, 3000), 3: (8000, 4000)}
    sysfs.write()
    assert reader.read().cards[0]["util"] == pytest.approx((2000 / 4000 + 0) / 8)


def test_the_readers_utilization_is_the_real_utilization_since(sysfs):
    # One child reads the counters twice, the metrics rewritten in between, and asks the
    # binding itself.
    metrics = sysfs.root / "class" / "rngd_mgmt" / "rngd!npu0pe2" / "metrics"
    code = (f"import furiosa_smi as s, json, pathlib\n"
            f"d = s.list_devices()[0]\n"
            f"a = d.performance_counter()\n"
            f"pathlib.Path({str(metrics)!r}).write_text('CycleCount: 2710\\nTaskCycleCount: 7d0\\n')\n"
            f"b = d.performance_counter()\n"
            f"print(json.dumps([b[2].utilization_since(a[2]), [[a[2].cycle_count(), "
            f"a[2].task_execution_cycle()], [b[2].cycle_count(), b[2].task_execution_cycle()]]]))")
    done = subprocess.run([*sysfs.prefix(), sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=30, check=True)
    theirs, (before, after) = json.loads(done.stdout)
    ours = smi.utilization({"2": after}, {"2": before}, cores=1)
    assert theirs == pytest.approx((0x7d0 - 1000) / (0x2710 - 4000)) and ours == pytest.approx(
        theirs)
