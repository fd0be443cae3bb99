"""Automatic retry (daemon/launchers/retry.py): only failures rngdctl recognises as transient.

The rule on its own, then the local launcher with a real child process whose
card is held at start (the trainer's own words), through the real scheduler.
The Kubernetes classes (image pull, card race, foreign holder) are exercised
against kmock in tests/k8s (test_follow, test_admission, test_restart).
"""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from daemon.home import parse_config
from daemon.launchers import retry

HELD = "backend furiosa:0: card 0 is held by pid 4242 (python -m trainer train)"


@pytest.mark.parametrize("cls", retry.CLASSES)
def test_a_transient_class_is_retried_until_max_attempts_tries(cls):
    assert retry.decide(cls, tries=1, limit=3).retry
    assert retry.decide(cls, tries=2, limit=3).retry
    spent = retry.decide(cls, tries=3, limit=3)
    assert not spent.retry and spent.how == retry.EXHAUSTED


def test_a_failure_of_no_class_or_with_evidence_against_it_is_never_retried():
    assert not retry.decide(None, tries=0, limit=9).retry
    permanent = retry.decide(retry.IMAGE_PULL, tries=0, limit=9, transient=False,
                             evidence="never pulled")
    assert not permanent.retry
    assert permanent.failed_reason("image x: ErrImagePull") == (
        "image x: ErrImagePull (not retried: never pulled)")


def test_an_image_pull_is_transient_only_when_the_image_was_pulled_before(store):
    image = "registry.example/furiosa-llm:2026.1"
    assert not retry.image_pull_transient(store, image, "ErrImagePull")[0]
    assert retry.image_pull_transient(store, image, "ErrImagePull", listed=True)[0]
    assert not retry.image_pull_transient(store, image, "InvalidImageName", listed=True)[0]

    ran = store.add_run({"cards": 1, "image": None})  # the default image, run by a pod of ours
    store.update_run(ran, image_digest="registry.example/furiosa-llm@sha256:ab")
    assert retry.image_pull_transient(store, image, "ErrImagePull", default_image=image)[0]
    assert not retry.image_pull_transient(store, "other:1", "ErrImagePull",
                                          default_image=image)[0]


def test_the_trainers_held_card_words_are_what_the_rule_recognises():
    from trainer.backends.kinds import _held_by

    class Holder:
        pid, cmdline = 4242, "python -m trainer train"

    assert retry.card_held(f"backend furiosa:0: {_held_by(0, [Holder()])}")
    assert retry.card_held("backend furiosa:auto: every RNGD card is held: card 0 ...")
    assert not retry.card_held("exit code 1: out of data")
    assert not retry.card_held(None)


def test_max_attempts_is_the_daemon_s_unless_the_older_k8s_key_is_set():
    assert retry.max_attempts(parse_config("")) == 3
    assert retry.max_attempts(parse_config("[daemon]\nmax_attempts = 5\n")) == 5
    assert retry.max_attempts(parse_config("[daemon]\nmax_attempts = 5\n"
                                           "[k8s]\nmax_attempts = 2\n")) == 2


@pytest.mark.parametrize("bad", ["0", "-1", "2.5", "true"])
def test_a_bad_max_attempts_is_one_line(bad):
    from daemon.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\[daemon\] max_attempts must be"):
        parse_config(f"[daemon]\nmax_attempts = {bad}\n")


# === the local launcher, with a real child =====================================

FAKE_TRAINER = """\
#!{python}
# Stands in for `python -m trainer train`: the Nth start does what the script says.
import json, sys, time
from pathlib import Path
count = Path({count!r})
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
script = {script!r}
error = script[min(n, len(script)) - 1]
status = "ok" if error is None else "error"
print(json.dumps({{"kind": "end", "v": 1, "status": status, "error": error,
                  "time": time.time()}}), flush=True)
sys.exit(0 if error is None else 2)
"""


@pytest.fixture
def local_daemon(home, store, tmp_path, start_daemon):
    from daemon.launchers.local import LocalLauncher
    from daemon.probes.host_reading import HostReading
    from daemon.run.ingest import Ingest

    def make(script, toml=""):
        fake = tmp_path / "fake-python"
        fake.write_text(textwrap.dedent(FAKE_TRAINER).format(
            python=sys.executable, count=str(tmp_path / "starts"), script=script))
        fake.chmod(0o755)
        config = parse_config(toml)
        launcher = LocalLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                                 python=str(fake))
        return start_daemon(config, launcher,
                            lambda: HostReading(0.0, (0.1, 0.1, 0.1), (), True))

    return make


def run_to_end(daemon, store, run_id, timeout=60.0):
    deadline = time.monotonic() + timeout
    while store.run(run_id)["status"] not in ("done", "failed", "oom", "timeout", "cancelled"):
        assert time.monotonic() < deadline, store.events(run_id=run_id)
        daemon.tick()
        time.sleep(0.05)
    return store.run(run_id)


def test_a_card_held_at_start_is_retried_and_each_retry_is_an_event(local_daemon, store):
    daemon = local_daemon([HELD, HELD, None])
    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 5, "backend": "furiosa:0",
                            "model": "tiny-llama", "data": "synthetic", "seq_len": 32,
                            "accum": 1, "lr": 1e-5, "seed": 0})

    run = run_to_end(daemon, store, run_id)

    assert (run["status"], run["attempts"]) == ("done", 3)
    retries = store.events(run_id=run_id, kinds=["retry"])
    assert [e["data"]["attempt"] for e in retries] == [2, 3]
    assert all(e["data"]["class"] == "foreign_holder" and e["data"]["max_attempts"] == 3
               and e["data"]["reason"] == HELD for e in retries)
    assert retries[0]["message"].startswith("foreign_holder: try 2 of 3 next")


def test_a_card_held_on_every_try_fails_after_max_attempts(local_daemon, store):
    daemon = local_daemon([HELD], toml="[daemon]\nmax_attempts = 2\n")
    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 5, "backend": "furiosa:0",
                            "model": "tiny-llama", "data": "synthetic", "seq_len": 32,
                            "accum": 1, "lr": 1e-5, "seed": 0})

    run = run_to_end(daemon, store, run_id)

    assert (run["status"], run["attempts"]) == ("failed", 2)
    assert run["exit_reason"].startswith(HELD)
    assert len(store.events(run_id=run_id, kinds=["retry"])) == 1


def test_a_failure_that_is_not_transient_is_never_retried(local_daemon, store):
    daemon = local_daemon(["out of data: the dataset has 3 rows", None])
    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 5, "backend": "cpu",
                            "model": "tiny-llama", "data": "synthetic", "seq_len": 32,
                            "accum": 1, "lr": 1e-5, "seed": 0})

    run = run_to_end(daemon, store, run_id)

    assert (run["status"], run["attempts"]) == ("failed", 1)
    assert store.events(run_id=run_id, kinds=["retry"]) == []
    assert run["exit_reason"].startswith("out of data")
