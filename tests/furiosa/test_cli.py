"""Acceptance: ``python -m trainer train|compile --backend furiosa:...`` on a host without a card,
and on a card another process holds."""

from __future__ import annotations

import json

import pytest

from tests.furiosa.conftest import release_path

pytestmark = pytest.mark.slow


def _one_line_and_the_end_record(done) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainer: error: ")
    records = [json.loads(line) for line in done.stdout.splitlines()]  # nothing but records
    end = records[-1]
    assert end["kind"] == "end" and end["status"] == "error"
    assert lines[0] == f"trainer: error: {end['error']}"
    return end["error"]


@pytest.mark.parametrize("spec", ["furiosa:0", "furiosa:auto"])
def test_a_furiosa_backend_without_a_card_exits_2_naming_the_missing_driver(python_in, spec):
    done = python_in("-m", "trainer", "train", "--steps", "2", "--backend", spec)
    error = _one_line_and_the_end_record(done)
    assert error.startswith(f"backend {spec}: no RNGD card or driver on this host")
    assert "librenegade.so" in error


@pytest.mark.parametrize("spec", ["furiosa:0", "furiosa:auto"])
def test_compile_without_a_card_exits_2_naming_the_missing_driver(python_in, spec):
    done = python_in("-m", "trainer", "compile", "--backend", spec, "--seq-len", "8")
    error = _one_line_and_the_end_record(done)
    assert error.startswith(f"backend {spec}: no RNGD card or driver on this host")
    assert "librenegade.so" in error


def generated_proc(root, holders) -> str:
    """A /proc with ``holders`` (pid, the device file it has open, its command line)."""
    proc = root / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1700000000\n")
    for pid, target, command in holders:
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "3").symlink_to(target)
        (proc / str(pid) / "cmdline").write_bytes(command)
    return str(proc)


def test_a_card_another_process_holds_is_named_with_its_pid_and_command(python_in, tmp_path):
    # The holder scan reads a generated /proc ($RNGDCTL_PROC): a process with card 0's
    # device files open, and one with card 10's, which does not hold card 0.
    proc = generated_proc(tmp_path, ((4242, "/dev/rngd/npu0pe0-3", b"python\0-m\0trainer\0train"),
                                     (4343, "/dev/rngd/npu10mgmt", b"furiosa-smi\0status")))
    done = python_in("-m", "trainer", "train", "--steps", "2", "--backend", "furiosa:0",
                     env={"RNGDCTL_PROC": proc})
    error = _one_line_and_the_end_record(done)
    assert error == "backend furiosa:0: card 0 is held by pid 4242 (python -m trainer train)"


def test_auto_picks_the_card_no_process_holds_says_so_and_names_the_missing_driver(
        python_in, tmp_path):
    # Cards 0 and 1 are present (their device files in a generated $RNGDCTL_RNGD_DEV), a
    # process holds card 0 (a generated /proc): auto takes card 1, whose driver is missing.
    dev = tmp_path / "dev" / "rngd"
    dev.mkdir(parents=True)
    for card in (0, 1):
        for name in ("mgmt", "pe0", "pe0-3"):
            (dev / f"npu{card}{name}").touch()
    proc = generated_proc(tmp_path, ((4242, f"{dev}/npu0pe0-3", b"python\0-m\0trainer\0train"),))
    done = python_in("-m", "trainer", "train", "--steps", "2", "--backend", "furiosa:auto",
                     env={"RNGDCTL_PROC": proc, "RNGDCTL_RNGD_DEV": str(dev)})
    error = _one_line_and_the_end_record(done)
    assert error == ("backend furiosa:auto: picked card 1, as card 0 is held by pid 4242 "
                     "(python -m trainer train): no RNGD card or driver on this host: "
                     "furiosa-torch cannot load the driver library librenegade.so "
                     f"(card 1, {dev}/npu1)")


def test_furiosa_torch_2026_2_uses_its_rngd_device_and_fails_the_same_way(python_in):
    older = release_path("furiosa-torch==2026.2.0")
    if not older.is_dir():
        pytest.skip(f"furiosa-torch 2026.2.0 is not at {older}")
    shown = python_in("-c", "import trainer.backends.furiosa_torch as f; "
                      "print(f.version(), f.device_type(), f.card_device(5))", first=older)
    assert shown.stdout.split() == ["2026.2.0", "rngd", "rngd:5"], shown.stderr
    done = python_in("-m", "trainer", "train", "--steps", "2", "--backend", "furiosa:0",
                     first=older)
    error = _one_line_and_the_end_record(done)
    assert error.startswith("backend furiosa:0: no RNGD card or driver on this host")
    assert "librenegade.so" in error  # 2026.2 names it only in its native log: read from there
