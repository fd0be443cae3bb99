"""The README's Use section, as written: every `rngdctl ...` line of it runs, on a fresh home
that holds the runs the line names, and exits 0 (or the code its comment documents).

Each line gets its own copy of one seeded home (runs 1-8, each done with a baseline and a
main pass of tiny-llama, as `make demo`'s run), changed only where the line's own words say
what its run must be: `cancel` a running run, `resume` an ended one, `edit` a queued one.
Lines that run until stopped (`daemon`, `tui`, `--watch`, `--follow`) are started, given
time to show they run, and stopped as a user does, by Ctrl-C (SIGINT) or `q`.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.stepmodel.synthetic_logs import make_pass
from trainer import records

#: Exit codes a line's README comment documents, by command (`gates`: "exit 0 all pass, 1
#: one blocks"; `cards`: "exit 1 with none", as on a host without a card); every other line
#: must exit 0.
DOCUMENTED = {"gates": {0, 1}, "cards": {0, 1}}
#: What a line's run must be, by the command's own words in the README.
STATE_FOR = {"cancel": "running", "resume": "failed", "edit": "queued"}
#: Seconds a line that runs until stopped is given to show it runs (a loaded host).
START_S = 60.0


def use_lines(text: str) -> list[str]:
    """Every `rngdctl` command line of the README's Use section, continuations joined and
    the trailing comment dropped."""
    section = text.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        for raw in block.replace("\\\n", " ").splitlines():
            words = shlex.split(raw, comments=True)
            if words[:1] == ["rngdctl"]:
                lines.append(shlex.join(words).replace(" '&&' ", " && "))
    return lines


LINES = use_lines((REPO / "README.md").read_text())


def test_the_use_section_is_read_whole():
    assert len(LINES) >= 20
    assert "rngdctl submit --cards 2 --resident 1 --steps 2000 --checkpoint-every 100 " \
           "--eval-split 0.05 --eval-every 100" in LINES  # a continued line, joined
    assert "rngdctl wait 7 8 && rngdctl export 7 8" in LINES
    assert any(line.startswith("rngdctl submit --cards 1 --notify") for line in LINES)


# === the home the lines run on =================================================


def seed(home) -> None:
    """Runs 1-8: tiny-llama on cpu, 1 card x 2 resident, seq 64, accum 2, each with a
    20-step all-offload baseline and 20 main steps, done."""
    from daemon.run.ingest import Ingest

    config = {"cards": 1, "resident": 2, "steps": 20, "model": "tiny-llama", "seq_len": 64,
              "accum": 2, "lr": 1e-3, "data": "synthetic", "seed": 0, "backend": "cpu",
              "baseline": True, "interleave": 0}
    shape = {"layers": 4, "seq_len": 64, "accum": 2}
    with home.store() as store:
        for _ in range(8):
            run_id = store.add_run(config)
            lines = []
            for label, resident in ((records.BASELINE, 0), (records.MAIN, 2)):
                steps = make_pass(resident_per_card=resident, label=label, raw=False, **shape)
                steps[-1].extra["params_per_layer"] = 46_208  # tiny-llama's; shared dict
                lines.append(records.dumps(records.Start(config_label=label, time=900.0, config={
                    "backend": "cpu", "cards": 1, "layers": 4, "resident_layers": resident,
                    "seq_len": 64, "accum": 2, "micro_batch": 1, "vocab_size": 512,
                    "hidden_size": 64, "tied_head": False, "params_per_layer": 46_208})))
                lines += [records.dumps(s) for s in steps]
            assert store.claim_for_launch(run_id, launcher="local")
            Ingest(store).feed(run_id, lines)
            store.finish_run(run_id, "done")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    from daemon.home import Home

    home = Home(tmp_path_factory.mktemp("readme") / "home").ensure()
    seed(home)
    return home


def home_for(seeded, line: str, tmp_path: Path):
    """A copy of the seeded home, with the run the line names in the state its words ask."""
    from daemon.home import Home

    home = Home(shutil.copytree(seeded.path, tmp_path / "home"))
    words = line.split()
    state = STATE_FOR.get(words[1])
    if state is not None:
        run_id = int(words[2])
        with home.store() as store:
            store.update_run(run_id, status=state, ended=None)
    return home


def rngdctl_on_path(tmp_path: Path) -> Path:
    """A folder with an `rngdctl` that runs this tree's (as `. .venv/bin/activate` gives)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "rngdctl"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m rngdctl \"$@\"\n")
    script.chmod(0o755)
    return bin_dir


def environment(home, tmp_path: Path) -> dict:
    return {**os.environ, "RNGDCTL_HOME": str(home.path),
            "PATH": f"{rngdctl_on_path(tmp_path)}:{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                        os.environ.get("PYTHONPATH")]))}


def runs_until_stopped(line: str) -> bool:
    words = line.split()
    return words[1] in ("daemon", "tui") or "--watch" in words or "-f" in words \
        or "--follow" in words


# === running the lines =========================================================


def run_to_the_end(line: str, env: dict, cwd: Path) -> tuple[int, str]:
    proc = subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def stop_when_running(line: str, env: dict, cwd: Path, home) -> tuple[int, str]:
    """Start the line in a terminal of its own, wait until it shows it runs, then stop it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(shlex.split(line), env={**env, "TERM": "xterm-256color"}, cwd=cwd,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    shown = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and proc.poll() is None:
            if running(line, bytes(shown), home):
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"{line!r} ended by itself: {shown.decode(errors='replace')}"
        if line.split()[1] == "tui":
            os.write(master, b"q")
        else:
            proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
        reader.join(timeout=5)
    return code, shown.decode(errors="replace")


def running(line: str, shown: bytes, home) -> bool:
    """The line shows it runs: a daemon has stored its heartbeat, a watcher printed."""
    if line.split()[1] == "daemon":
        with home.store() as store:
            row = store.daemon_state()
        return bool(row and row.get("heartbeat") and not row.get("stopped"))
    return len(shown.strip()) > 0 and (line.split()[1] != "tui" or b"queue" in shown)


@pytest.mark.parametrize("line", LINES)
def test_every_rngdctl_line_of_the_readme_runs_as_written(line, seeded, tmp_path, request):
    home = home_for(seeded, line, tmp_path)
    env = environment(home, tmp_path)
    cwd = tmp_path / "work"
    cwd.mkdir()
    if "--launcher k8s" in line:  # the cluster a user has: the emulator, by KUBECONFIG
        cluster = request.getfixturevalue("emulated_cluster")
        env["KUBECONFIG"] = str(cluster.kubeconfig)
    if runs_until_stopped(line):
        code, output = stop_when_running(line, env, cwd, home)
    else:
        code, output = run_to_the_end(line, env, cwd)
    assert code in DOCUMENTED.get(line.split()[1], {0}), output
    assert "Traceback" not in output


@pytest.fixture
def emulated_cluster(tmp_path):
    from tests.k8s.k8s_emulator import NODE, Cluster

    emu = Cluster(tmp_path)
    emu.add_node(NODE, cards=8)
    yield emu
    emu.close()


def test_each_code_taken_as_documented_is_in_its_lines_comment():
    text = (REPO / "README.md").read_text().split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    for command, codes in DOCUMENTED.items():
        [comment] = [line.split("#", 1)[1] for line in text.splitlines()
                     if line.startswith(f"rngdctl {command} ")]
        assert all(f"exit {c}" in comment or f", {c} " in comment for c in codes - {0}), command
