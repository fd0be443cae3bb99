"""A stand-in for furiosa-smi's binding (module ``furiosa_smi``), written as a real package
that a real child process imports (tests/spine/test_smi.py, tests/k8s/test_agents.py,
bench/cards_read.py).

Its classes carry the real 2026.4 classes' names, every reading a method as there
(tests/spine/test_smi.py compares the two, so they cannot drift apart). Card values come
from ``cards.txt`` beside the module (a Python literal), read at import: a test rewrites
it between two readings (counters that move give a utilization).
"""

from __future__ import annotations

import json
from pathlib import Path

MODULE = r'''
import os, time

# Neither json nor pathlib (json imports re: 10 ms of a child's CPU): the stand-in's own
# imports count in bench/cli_startup.py's `cards` row, and the real binding has none.
with open(os.path.join(os.path.dirname(__file__), "cards.txt"), encoding="utf-8") as _f:
    _CONFIG = eval(_f.read(), {"__builtins__": {}, "nan": float("nan"), "inf": float("inf")})
__version__ = "2026.4.0"


class SmiError(Exception):
    pass


class DeviceNotFoundError(SmiError):
    pass


class IoError(SmiError):
    pass


class _Member:
    def __init__(self, name):
        self._name = name

    def __eq__(self, other):
        return type(other) is type(self) and other._name == self._name

    def __hash__(self):
        return hash((type(self).__name__, self._name))

    def __str__(self):
        return self._name

    def __repr__(self):
        return f"{type(self).__name__}.{self._name}"


class ThrottleReason(_Member):
    pass


class CoreStatus(_Member):
    pass


class GovernorProfile(_Member):
    pass


for _cls, _names in ((ThrottleReason, ("Idle", "ThermalSlowdown", "AppPowerCap", "AppClockCap",
                                       "HwClockCap", "HwBusLimit", "HwPowerCap", "GovClockCap",
                                       "OtherReason", "Unknown")),
                     (CoreStatus, ("Available", "Occupied")),
                     (GovernorProfile, ("Performance", "PowerSave"))):
    for _name in _names:
        setattr(_cls, _name, _cls(_name))


class VersionInfo:
    def __init__(self, text):
        self._text = text
        number, _, self._meta = text.partition(", ")
        self._parts = [int(p) for p in number.split(".")]

    def major(self):
        return self._parts[0]

    def minor(self):
        return self._parts[1]

    def patch(self):
        return self._parts[2]

    def prerelease(self):
        return None

    def metadata(self):
        return self._meta or None

    def __str__(self):
        return self._text


class DeviceTemperature:
    def __init__(self, soc_peak, ambient):
        self._values = (soc_peak, ambient)

    def soc_peak(self):
        return self._values[0]

    def ambient(self):
        return self._values[1]


class MemoryInfo:
    def __init__(self, total, used):
        self._values = (total, used)

    def total_bytes(self):
        return self._values[0]

    def in_use_bytes(self):
        return self._values[1]


class DeviceCoreRange:
    def __init__(self, node, core):
        self._node, self._core = node, core

    def dev_node_index(self):
        return self._node

    def start_core(self):
        return self._core

    def end_core(self):
        return self._core

    def cores(self):
        return [self._core]

    def __hash__(self):
        return hash((self._node, self._core))

    def __eq__(self, other):
        return isinstance(other, DeviceCoreRange) and (other._node, other._core) == (
            self._node, self._core)


class PePerformanceCounter:
    def __init__(self, cycles, task):
        self._values = (cycles, task)

    def cycle_count(self):
        return self._values[0]

    def task_execution_cycle(self):
        return self._values[1]

    def utilization_since(self, prev):
        cycles = self._values[0] - prev._values[0]
        return (self._values[1] - prev._values[1]) / cycles if cycles > 0 else 0.0


CORES = 8
PE_BYTES = 6375342080


class Device:
    def __init__(self, index, spec):
        self._index, self._spec = index, spec

    def _get(self, name, value):
        fail = (self._spec.get("fail") or {}).get(name)
        if fail:
            raise IoError(fail)
        return value

    def device_name(self):
        return self._get("device_name", f"npu{self._index}")

    def uuid(self):
        return self._get("uuid", self._spec["uuid"])

    def serial(self):
        return self._get("serial", self._spec.get("serial", "RNGD0000SN" + str(self._index)))

    def firmware_version(self):
        return self._get("firmware_version", VersionInfo(self._spec.get(
            "firmware", "2026.4.0, 4dfed1852e7b")))

    def liveness(self):
        return self._get("liveness", bool(self._spec.get("alive", True)))

    def device_temperature(self):
        return self._get("device_temperature", DeviceTemperature(
            float(self._spec.get("soc_peak", 41.5)), float(self._spec.get("ambient", 35.25))))

    def power_consumption(self):
        return self._get("power_consumption", float(self._spec.get("power_w", 38.4)))

    def power_limit(self):
        return self._get("power_limit", int(self._spec.get("power_limit_mw", 180000)))

    def core_num(self):
        return CORES

    def _occupied(self):
        return set(self._spec.get("occupied") or ())

    def memory_usage(self):
        used = int(self._spec.get("used_bytes", 0))
        return self._get("memory_usage", {
            DeviceCoreRange(self._index, c): MemoryInfo(
                PE_BYTES, used if c in self._occupied() else 0) for c in range(CORES)})

    def performance_counter(self):
        counters = self._spec.get("counters") or {}
        return self._get("performance_counter", {
            c: PePerformanceCounter(*(counters.get(str(c)) or (0, 0))) for c in range(CORES)})

    def throttle_reason(self):
        return self._get("throttle_reason",
                         [getattr(ThrottleReason, r) for r in self._spec.get("throttle") or ()])

    def core_status(self):
        return self._get("core_status", {
            c: CoreStatus.Occupied if c in self._occupied() else CoreStatus.Available
            for c in range(CORES)})

    def governor_profile(self):
        return self._get("governor_profile", GovernorProfile.Performance)


def list_devices():
    if _CONFIG.get("hang"):
        time.sleep(3600)
    if _CONFIG.get("crash"):
        os.abort()
    return [Device(i, spec) for i, spec in enumerate(_CONFIG.get("cards") or [])]


def driver_info():
    if not _CONFIG.get("cards"):
        raise DeviceNotFoundError("device not found: no available device to read driver version")
    return VersionInfo("2026.4.0")
'''


def card(i: int, **values) -> dict:
    """One card's values: uuid, alive, soc_peak, ambient, power_w, power_limit_mw, throttle,
    occupied, used_bytes (per occupied core), counters ({core: [cycles, task cycles]}),
    fail ({method: error text})."""
    return {"uuid": f"f1d0-{i:04d}", **values}


def fake_binding(folder: Path, cards: list[dict] | None = None, *, hang: bool = False,
                 crash: bool = False) -> Path:
    """A ``furiosa_smi`` package under ``folder/site`` (returned: the PYTHONPATH entry)."""
    pkg = Path(folder) / "site" / "furiosa_smi"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(MODULE)
    set_cards(pkg.parent, cards or [], hang=hang, crash=crash)
    return pkg.parent


def set_cards(site: Path, cards: list[dict], *, hang: bool = False, crash: bool = False) -> None:
    """Change what the stand-in under ``site`` reports from the next reading on."""
    # JSON's types (string keys, lists), written as a Python literal for the stand-in to eval.
    config = json.loads(json.dumps({"cards": cards, "hang": hang, "crash": crash}))
    (Path(site) / "furiosa_smi" / "cards.txt").write_text(repr(config), encoding="utf-8")
