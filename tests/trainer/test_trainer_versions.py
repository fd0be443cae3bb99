"""The start record's versions: furiosa-smi's driver and firmware versions where it answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

# A stand-in for furiosa-smi's binding (a compiled module that needs a card to answer):
# the shapes of its 2026.4 API, VersionInfo fields and Device.firmware_version().
FAKE_SMI = '''
class VersionInfo:
    def __init__(self, major, minor, patch, prerelease=""):
        self.major, self.minor, self.patch, self.prerelease = major, minor, patch, prerelease

class Device:
    def __init__(self, fw):
        self._fw = fw
    def firmware_version(self):
        return self._fw

class SmiError(Exception):
    pass

def driver_info():
    if CARDS == 0:
        raise SmiError("device not found: no available device to read driver version")
    return VersionInfo(2026, 4, 0)

def list_devices():
    return [Device(VersionInfo(2026, 4, 1, "rc2")) for _ in range(CARDS)]
'''


def versions_with_smi(tmp_path, cards: int | None) -> dict:
    path = [str(REPO)]
    if cards is not None:
        (tmp_path / "furiosa_smi").mkdir()
        (tmp_path / "furiosa_smi" / "__init__.py").write_text(f"CARDS = {cards}\n{FAKE_SMI}")
        path.insert(0, str(tmp_path))
    code = ("import json; from trainer.output.provenance import versions; "
            "print(json.dumps(versions()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
                          timeout=120, check=True)
    return json.loads(done.stdout)


def test_driver_and_firmware_versions_come_from_furiosa_smi_where_a_card_answers(tmp_path):
    got = versions_with_smi(tmp_path, cards=2)
    assert got["rngd driver"] == "2026.4.0"
    assert got["rngd firmware"] == "2026.4.1-rc2"  # one value: both cards agree
    assert "torch" in got


def test_without_a_card_or_without_furiosa_smi_no_driver_version_is_claimed(tmp_path):
    assert not {"rngd driver", "rngd firmware"} & set(versions_with_smi(tmp_path, cards=0))
    assert not {"rngd driver", "rngd firmware"} & set(versions_with_smi(tmp_path, None))
