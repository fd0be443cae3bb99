"""A furiosa-smi CLI and a furiosa_smi_py binding that stand in for a card host's, as real
files that real processes run (tests/spine/test_smi.py, tests/k8s/test_agents.py)."""

from __future__ import annotations

import stat
from pathlib import Path

INFO = """\
+------+--------+---------------------+---------+---------+--------------+
| Arch | Device | Firmware            | Temp.   | Power   | PCI-BDF      |
+------+--------+---------------------+---------+---------+--------------+
| rngd | npu0   | 1.7.0, 4dfed1852e7b | 40.98°C | 38.40 W | 0000:03:00.0 |
+------+--------+---------------------+---------+---------+--------------+
| rngd | npu1   | 1.7.0, 4dfed1852e7b | 41.34°C | 37.44 W | 0000:04:00.0 |
+------+--------+---------------------+---------+---------+--------------+
"""


FAKE_BINDING = '''
import time

COUNTS = {"npu0": 0, "npu1": 3}


class _Errors:
    def __init__(self, n):
        self.n = n

    def __getattr__(self, name):
        if not name.endswith("_error_count"):
            raise AttributeError(name)
        return lambda: self.n if name == "device_error_count" else 1


class _Info:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


class _Device:
    def __init__(self, name):
        self.name = name

    def device_info(self):
        return _Info(self.name)

    def device_error_info(self):
        return _Errors(COUNTS[self.name])


def init():
    pass


def list_devices():
    HANG
    return [_Device(n) for n in COUNTS]
'''




def fake_smi(folder: Path) -> Path:
    """An executable ``furiosa-smi`` in ``folder`` whose ``info`` prints INFO."""
    smi = folder / "furiosa-smi"
    smi.write_text("#!/bin/sh\nif [ \"$1\" = info ]; then cat <<'X'\n" + INFO + "X\nfi\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return smi


def fake_binding(folder: Path, hang: bool = False) -> Path:
    """A ``furiosa_smi_py`` package under ``folder/site`` (returned: the PYTHONPATH entry):
    npu0 with no device errors, npu1 with 3, every other counter at 1; ``hang``: its
    list_devices never returns."""
    pkg = folder / "site" / "furiosa_smi_py"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_BINDING.replace(
        "HANG", "time.sleep(60)" if hang else "pass"))
    return folder / "site"
