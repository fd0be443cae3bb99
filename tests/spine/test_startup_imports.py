"""What `submit`, `runs` and `show` load: the step model only when they use it (issue 28);
what `cards` loads: neither the store nor the Kubernetes code on a local host (issue 27).

Each command runs in a fresh interpreter and reports the modules it loaded. The step
model's fit, comparison and pairing (and the statistics they read) cost these commands
about 40 ms of start-up, the notifier's threads and subprocesses 18 ms; the Kubernetes
pod readers (their regexes and hashlib) and sqlite3 about 18 ms of `cards`;
bench/cli_startup.py measures the start-up itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from smi_fakes import card, fake_binding

from tests.conftest import REPO
from tests.stepmodel.synthetic_logs import make_pass
from trainer import records

#: The step model's modules that price and judge a config. The package itself loads its
#: modules on first use, and ``shape`` (the placement rule that `submit` checks) is light.
STEP_MODEL = {"daemon.stepmodel.fit", "daemon.stepmodel.compare", "daemon.stepmodel.pairing",
              "daemon.stepmodel.runs"}
NOTIFIER = {"daemon.scheduling.notify"}
#: The run statistics and the stdlib's (with fractions, decimal and random: about 9 ms).
STATISTICS = {"daemon.stepmodel.stats", "statistics"}
#: What `cards` has no use for with the local launcher: the store (it reads no run), the
#: Kubernetes pod readers (no pod list), the daemon command's module and logging, and
#: socket (the host name comes from uname).
CARDS_LEAVE_OUT = {"daemon.store", "sqlite3", "daemon.launchers.k8s.cluster",
                   "daemon.launchers.k8s.jobspec",
                   "hashlib", "rngdctl.commands.daemon", "logging",
                   "socket"} | STEP_MODEL | NOTIFIER


def loaded_by(home, *command: str, env: dict | None = None, probe_after: str = "") -> set[str]:
    """The modules in sys.modules after ``rngdctl --home HOME COMMAND`` (``probe_after``:
    code run after the command, before the modules are listed)."""
    probe = (
        "import json, sys\n"
        "from rngdctl.cli import main\n"
        "try:\n"
        f"    main({['--home', str(home.path), *command]!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "modules = sorted(sys.modules)\n"
        f"{probe_after}"
        "print(json.dumps(modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, check=True, timeout=60,
                         env={**os.environ, **(env or {})}).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def printed_by(probe: str) -> list[str]:
    """The words ``python -c PROBE`` prints, in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=REPO, check=True, timeout=60).stdout.split()


@pytest.fixture
def queued_run(rngdctl):
    code, out, err = rngdctl("submit", "--cards", "1", "--resident", "0")
    assert code == 0, err
    return out.strip()


@pytest.fixture
def measured_run(store):
    """A finished run with a baseline pass and a main pass: `show` gives it a model row."""
    from daemon.run.ingest import Ingest
    from daemon.run.spec import validate

    run_id = store.add_run(validate({"cards": 1, "resident": 0, "steps": 20, "baseline": True}))
    lines = []
    for label in (records.BASELINE, records.MAIN):
        steps = make_pass(layers=4, raw=False, label=label)
        lines.append(records.dumps(records.Start(config_label=label, time=900.0, config={
            "backend": "cpu", "cards": 1, "layers": 4, "resident_layers": 0, "seq_len": 512,
            "accum": 4, "micro_batch": 1, "vocab_size": 512, "hidden_size": 64,
            "tied_head": False, "params_per_layer": 46_208})))
        lines += [records.dumps(s) for s in steps]
    Ingest(store).feed(run_id, lines)
    store.claim_for_launch(run_id, launcher="local")
    store.finish_run(run_id, "done")
    return str(run_id)


@pytest.mark.parametrize("command", [
    ["submit", "--cards", "1", "--resident", "0"], ["runs"], ["show", "1"], ["runs", "--json"],
    ["show", "1", "--json"],
])
def test_submit_runs_and_show_load_neither_the_step_model_nor_the_notifier(
        home, queued_run, command):
    loaded = loaded_by(home, *command)

    assert "daemon.store" in loaded  # the probe saw the command run
    assert loaded & (STEP_MODEL | NOTIFIER) == set()


@pytest.mark.parametrize("command", [["runs"], ["runs", "--json"], ["show", "1"],
                                     ["show", "1", "--json"]])
def test_runs_and_show_load_no_statistics_while_no_run_has_steps(home, queued_run, command):
    # The queued run's estimate looks for a baseline of its model, and finds no run with
    # steps; no daemon has checked the run's gates: nothing needs the medians.
    loaded = loaded_by(home, *command)

    assert "daemon.scheduling.estimate" in loaded  # the probe saw the queue estimated
    assert loaded & STATISTICS == set()


@pytest.mark.parametrize("command", [["submit", "--cards", "1", "--resident", "0"], ["runs"],
                                     ["show", "1"], ["runs", "--json"], ["show", "1", "--json"]])
def test_submit_runs_and_show_make_no_record_class_nor_load_the_plan(home, measured_run,
                                                                     queued_run, command):
    # A record class is a dataclass made on its first instance: making the seven cost each
    # command 29 million instructions at import (8 % of `runs`, issue 33), and the plan's
    # dataclasses 17 million more to `runs` and `show`, which only need the queue's estimate.
    loaded = loaded_by(home, *command, probe_after="from trainer import records\n"
                       "import dataclasses\n"
                       "assert not dataclasses.is_dataclass(records.Step), 'records made'\n")

    assert "trainer.records" in loaded  # the probe saw the command import it
    assert "daemon.scheduling.plan" not in loaded


def test_a_record_class_is_a_frozen_dataclass_from_its_first_instance_in_any_thread():
    probe = (
        "import dataclasses, threading\n"
        "from trainer import records\n"
        "made = [dataclasses.is_dataclass(c) for c in (records.Step, records.Eval)]\n"
        "barrier, errors = threading.Barrier(8), []\n"
        "def first():\n"
        "    barrier.wait()\n"
        "    try:\n"
        "        records.Step('main', 1, 2.0, 0.5, 8, 1e-5)\n"
        "    except Exception as exc:\n"
        "        errors.append(repr(exc))\n"
        "threads = [threading.Thread(target=first) for _ in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "step = records.Step('main', 1, 2.0, 0.5, 8, 1e-5)\n"
        "try:\n"
        "    step.loss = 0.0\n"
        "except dataclasses.FrozenInstanceError:\n"
        "    made.append('frozen')\n"
        "print(made, errors, dataclasses.is_dataclass(records.Eval),\n"
        "      step == records.Step('main', 1, 2.0, 0.5, 8, 1e-5))\n"
    )
    assert printed_by(probe) == ["[False,", "False,", "'frozen']", "[]", "True", "True"]


@pytest.mark.parametrize("cards", [0, 8])
def test_cards_loads_neither_the_store_nor_the_kubernetes_code_on_a_local_host(
        home, tmp_path, cards):
    # 0: the installed binding, no card on this host (or not installed); 8: the stand-in.
    env = {"PYTHONPATH": str(fake_binding(tmp_path, [card(i) for i in range(cards)]))} \
        if cards else None
    loaded = loaded_by(home, "cards", env=env)

    assert {"daemon.probes.smi", "daemon.probes.holders"} <= loaded  # the probe saw the command read
    assert ("rngdctl.card_units" in loaded) == bool(cards)  # and print the cards it found
    assert loaded & CARDS_LEAVE_OUT == set()


def test_show_loads_the_step_model_for_a_run_with_a_model_row(home, measured_run):
    loaded = loaded_by(home, "show", measured_run)

    assert STEP_MODEL <= loaded


def test_submit_cards_best_loads_the_step_model_to_choose(home, measured_run):
    loaded = loaded_by(home, "submit", "--cards", "best", "--model", "tiny-llama")

    assert STEP_MODEL <= loaded


def test_runs_loads_the_step_model_once_a_queued_run_can_be_estimated(home, measured_run,
                                                                    queued_run):
    loaded = loaded_by(home, "runs")

    assert STEP_MODEL <= loaded


def test_the_step_model_package_gives_every_public_name_and_keeps_compare_and_fit_functions():
    # Its modules load on first use; loading `compare` and `fit` as modules first (as a
    # sibling module or a test does) must not hide the functions of those names.
    probe = (
        "import daemon.stepmodel.compare, daemon.stepmodel.fit\n"
        "from daemon import stepmodel\n"
        "missing = [n for n in stepmodel.__all__ if not hasattr(stepmodel, n)]\n"
        "print(missing, callable(stepmodel.compare), callable(stepmodel.fit),\n"
        "      type(stepmodel.compare).__name__, type(stepmodel.fit).__name__)\n"
    )
    assert printed_by(probe) == ["[]", "True", "True", "function", "function"]
