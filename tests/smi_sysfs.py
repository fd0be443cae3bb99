"""Synthetic RNGD cards for the REAL furiosa_smi 2026.4 binding to read.

The binding reads sysfs and /dev only (no ioctl): PCI devices with Furiosa's
vendor id, ``/sys/class/rngd_mgmt/rngd!npuNmgmt/*``, a per-PE
``rngd!npuNpeP/{alloc_status,metrics}``, the PCI device's hwmon, and character
devices under ``/dev/rngd``. The layout here is what the binding asked for
(its error messages and an strace name each path) and what it accepted; it
is not a card's. In a user and mount namespace (``unshare -rm``) the tree is
mounted at those paths for the child process alone, and ``/dev/rngd`` is a
tmpfs whose entries are 0:0 character devices (allowed without privilege).
Nothing outside the child sees it.

``FakeCard`` values are what the binding should report back: °C, W, bytes.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

#: ThrottleReason bits as the binding decodes ``throttle_reason`` (0x2: ThermalSlowdown).
THROTTLE_BITS = {"Idle": 0x1, "ThermalSlowdown": 0x2, "AppPowerCap": 0x4, "AppClockCap": 0x8,
                 "HwClockCap": 0x10, "HwBusLimit": 0x20, "HwPowerCap": 0x40,
                 "GovClockCap": 0x80, "OtherReason": 0x100}
CORES = 8


@dataclass
class FakeCard:
    uuid: str
    serial: str
    firmware: str = "2026.4.0, 4dfed1852e7b"
    driver: str = "2026.4.0"
    alive: bool = True
    soc_peak_c: float = 41.5
    ambient_c: float = 35.25
    power_w: float = 38.4
    power_limit_w: float = 180.0
    throttle: tuple[str, ...] = ()
    occupied: tuple[int, ...] = ()
    used_bytes: int = 0  # on each occupied core
    #: per core: (cycles, task cycles), read only on occupied cores
    counters: dict[int, tuple[int, int]] = field(default_factory=dict)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class FakeSysfs:
    """A folder with the cards' sysfs; ``prefix`` runs a command with it mounted."""

    def __init__(self, root: Path, cards: list[FakeCard]):
        self.root = root
        self.cards = cards
        self.write()

    def bdf(self, i: int) -> str:
        return f"0000:{0x17 + i:02x}:00.0"

    def write(self) -> None:
        for i, card in enumerate(self.cards):
            pci = self.root / "pci" / self.bdf(i)
            _write(pci / "vendor", "0x1ed2\n")
            _write(pci / "device", "0x0001\n")
            _write(pci / "class", "0x120000\n")
            _write(pci / "numa_node", "0\n")
            driver = self.root / "drivers" / "rngd"
            driver.mkdir(parents=True, exist_ok=True)
            if not (pci / "driver").is_symlink():
                (pci / "driver").symlink_to(driver)
            hwmon = pci / "hwmon" / f"hwmon{i}"
            _write(hwmon / "power1_label", "RMS_TOTAL\n")
            _write(hwmon / "power1_average", f"{round(card.power_w * 1e6)}\n")
            _write(hwmon / "power1_max", f"{round(card.power_limit_w * 1e6)}\n")
            _write(hwmon / "temp1_label", "AMBIENT\n")
            _write(hwmon / "temp1_input", f"{round(card.ambient_c * 1000)}\n")
            _write(hwmon / "temp2_label", "PEAK\n")
            _write(hwmon / "temp2_input", f"{round(card.soc_peak_c * 1000)}\n")
            mgmt = self.root / "class" / "rngd_mgmt" / f"rngd!npu{i}mgmt"
            _write(mgmt / "busname", f"{self.bdf(i)}\n")
            _write(mgmt / "dev", f"511:{i}\n")
            _write(mgmt / "device_uuid", f"{card.uuid}\n")
            _write(mgmt / "device_sn", f"{card.serial}\n")
            _write(mgmt / "fw_version", f"{card.firmware}\n")
            _write(mgmt / "version", f"{card.driver}\n")
            _write(mgmt / "device_state", "0\n" if card.alive else "1\n")
            bits = sum(THROTTLE_BITS[r] for r in card.throttle)
            _write(mgmt / "throttle_reason", f"{bits:#x}\n")
            _write(mgmt / "npu_governor", "performance\n")
            _write(mgmt / "pe_occupancy",
                   "".join("1\n" if core in card.occupied else "0\n" for core in range(CORES)))
            for core in range(CORES):
                pe = self.root / "class" / "rngd_mgmt" / f"rngd!npu{i}pe{core}"
                cycles, task = card.counters.get(core, (0, 0))
                _write(pe / "metrics", f"CycleCount: {cycles:x}\nTaskCycleCount: {task:x}\n")
                _write(pe / "alloc_status", f"dram_capacity: {6375342080:#x}\n"
                       f"dram_usage: {card.used_bytes:#x}\nshared_capacity: 0x0\n"
                       f"shared_usage: 0x0\n")

    def device_files(self) -> list[str]:
        return [name for i in range(len(self.cards))
                for name in (f"npu{i}", *(f"npu{i}pe{c}" for c in range(CORES)),
                             f"npu{i}pe0-1", f"npu{i}pe0-3", f"npu{i}pe4-7")]

    def prefix(self) -> list[str]:
        """argv that runs the rest of the command with the cards mounted."""
        r = self.root
        (r / "realdev").mkdir(exist_ok=True)
        script = "\n".join([
            "set -e",
            f"mount --bind '{r}/pci' /sys/bus/pci/devices",
            f"mount --bind '{r}/class' /sys/class",
            f"mount --rbind /dev '{r}/realdev'",
            "mount -t tmpfs none /dev",
            ("for f in null zero urandom random; do touch /dev/$f; "
             f"mount --bind '{r}/realdev'/$f /dev/$f; done"),
            "mkdir /dev/rngd",
            *(f"mknod /dev/rngd/{name} c 0 0" for name in self.device_files()),
            'exec "$@"',
        ])
        return ["unshare", "-rm", "sh", "-c", script, "sh"]


def namespaces_usable(tmp: Path) -> str | None:
    """None where a user and mount namespace with a 0:0 character device can be made,
    else why not (the test skips with it)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = tmp / "ns-probe"
    probe.mkdir(exist_ok=True)
    try:
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c",
             f"mount -t tmpfs none '{probe}' && mknod '{probe}/x' c 0 0"],
            capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if done.returncode != 0:
        return f"no unprivileged user/mount namespace here: {done.stderr.strip()[:120]}"
    return None
