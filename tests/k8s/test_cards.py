"""rngdctl cards: each card's furiosa-smi reading with the process, pod and run holding it
(the stand-in binding in the command's child process; kmock's pods over HTTP)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest
from k8s_emulator import NODE, NS
from smi_fakes import card, fake_binding

from tests.conftest import REPO

RUN_UID = str(uuid.uuid4())


@pytest.fixture
def node(cluster, proc, home):
    """Run 7's pod holds npu1 (process 100); npu0 is free."""
    cluster.put("v1/pods", {
        "metadata": {"name": "rngd-7-a0-abc12", "namespace": NS, "uid": RUN_UID,
                     "labels": {"app.kubernetes.io/managed-by": "rngdctl",
                                "rngdctl.io/run-id": "7"}},
        "spec": {"nodeName": NODE, "containers": [
            {"name": "c", "resources": {"limits": {"furiosa.ai/rngd": "1"}}}]},
        "status": {"phase": "Running"}}, namespace=NS)
    d = proc / "100"
    (d / "fd").mkdir(parents=True)
    os.symlink("/dev/rngd/npu1pe0", d / "fd" / "3")
    (d / "cmdline").write_bytes(b"python\0-m\0trainer\0")
    (d / "cgroup").write_text("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
                              f"pod{RUN_UID.replace('-', '_')}.slice/cri-containerd-ab.scope\n")
    home.config_path.write_text(f'[daemon]\nlauncher = "k8s"\n\n[k8s]\nnamespace = "{NS}"\n'
                                f'node = "{NODE}"\nretries = 0\nrequest_timeout = 2.0\n')
    return proc


@pytest.fixture
def smi_env(tmp_path):
    site = fake_binding(tmp_path, [
        card(0, soc_peak=47.5, power_w=64.0, occupied=[], counters={"0": [100, 0]}),
        card(1, soc_peak=71.0, power_w=132.0, occupied=[0, 1, 2, 3], used_bytes=5 << 30,
             throttle=["HwPowerCap"], counters={"0": [100, 50]})])
    return {"PYTHONPATH": str(site)}


def test_each_card_is_one_row_with_its_readings_and_the_pod_and_run_that_hold_it(
        node, rngdctl, smi_env):
    code, out, err = rngdctl("cards", "--proc", str(node), env=smi_env)
    assert code == 0, err
    header, npu0, npu1, footer = out.splitlines()
    assert header.split()[:4] == ["CARD", "ALIVE", "TEMP", "AMBIENT"]
    assert npu0.split()[:3] == ["npu0", "yes", "47.5"]
    assert "64 / 180 W" in npu0 and npu0.split()[-4:] == ["ok", "–", "–", "–"]
    assert "132 / 180 W" in npu1 and "20.0 / 47.5 GiB" in npu1 and "4/8" in npu1
    assert "hw power cap" in npu1 and "throttling: hw power cap" in npu1
    assert f"100  {NS}/rngd-7-a0-abc12  #7" in npu1
    assert footer.startswith("(furiosa-smi 2026.4.0, driver 2026.4.0; health: alive")


def test_cards_json_gives_the_cards_and_no_why(node, rngdctl, smi_env):
    code, out, err = rngdctl("cards", "--json", "--proc", str(node), env=smi_env)
    assert code == 0, err
    found = json.loads(out)
    assert found["why"] is None
    npu0, npu1 = found["cards"]
    assert (npu1["card"], npu1["temp_c"], npu1["health"]) == (
        "npu1", 71.0, ["throttling: hw power cap"])
    assert [(h["pid"], h["pod"], h["run"]) for h in npu1["holders"]] == [
        (100, f"{NS}/rngd-7-a0-abc12", 7)]
    assert npu0["holders"] == [] and "counters" not in npu0


def test_without_a_card_cards_says_why_in_one_line_and_exits_1(node, rngdctl):
    code, out, err = rngdctl("cards", "--proc", str(node))
    if code == 0:
        pytest.skip("this machine has an RNGD card")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        ("no RNGD card found by furiosa-smi 2026.4.0 (DeviceNotFoundError: device not found: "
        "no available device to read driver version)")]
    code, out, _ = rngdctl("cards", "--json", "--proc", str(node))
    assert code == 1 and json.loads(out)["cards"] == []
    assert json.loads(out)["why"].startswith("no RNGD card found by furiosa-smi 2026.4.0")


def test_watch_prints_a_reading_a_line_with_utilization_from_the_second(
        node, home, smi_env, tmp_path):
    from smi_fakes import set_cards

    process = subprocess.Popen(
        [sys.executable, "-m", "rngdctl", "--home", str(home.path), "cards", "--json",
         "--watch", "0.5", "--proc", str(node)], stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, **smi_env})
    try:
        first = json.loads(process.stdout.readline())
        set_cards(tmp_path / "site", [card(0, counters={"0": [900, 400]}),
                                      card(1, counters={"0": [100, 50]})])
        second = json.loads(process.stdout.readline())
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=20)
    assert code == 0
    assert [c["util"] for c in first["cards"]] == [None, None]
    assert second["cards"][0]["util"] == pytest.approx(0.5 / 8)  # 400 of 800 cycles, 1 core
