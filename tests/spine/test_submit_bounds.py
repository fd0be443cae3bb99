"""What `submit` (and edit, clone, restart) refuses before a run is queued (issues 33, 36).

A model config.json that is not one or that no host could hold, a --seq-len past the
model's positions, a furiosa backend the local launcher's python cannot run, unreadable
paths, non-UTF-8 or oversized data: one line, exit 2, nothing queued. A failed run that
could never run is not queued again by `restart --all-failed`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from daemon.errors import BadInput
from daemon.run.spec import trainer_argv, validate
from tests import model_configs as configs
from tests.conftest import REPO, bound_by_mode_bits, needs_mode_bits
from tests.model_configs import LLAMA_405B, TINY

RUN = {"cards": 1, "resident": 0, "steps": 5}


def model_folder(tmp_path, config) -> str:
    return str(configs.model_folder(tmp_path, config))


def local(memory_bytes: int | None):
    from daemon.run.host_fit import Host

    return Host("local", memory_bytes, sys.executable)


def submit(home, *args: str, bound: bool = False):
    argv = [sys.executable, "-m", "rngdctl", "--home", str(home.path), "submit", "--cards", "1",
            "--resident", "0", *args]
    return subprocess.run(bound_by_mode_bits(argv) if bound else argv, capture_output=True,
                          text=True, timeout=120, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def assert_refused(proc, home, *words: str) -> None:
    """One line, exit 2, nothing queued."""
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: ") and proc.stdout == ""
    for word in words:
        assert word in proc.stderr, proc.stderr
    with home.store() as store:
        assert store.runs() == []


# === model configs (36.4, 36.8) ==============================================


def test_submit_refuses_a_config_json_claiming_a_trillion_layers(home, tmp_path):
    folder = model_folder(tmp_path, {**TINY, "num_hidden_layers": 10 ** 12})
    assert_refused(submit(home, "--model", folder), home, "num_hidden_layers", "1,024")


@pytest.mark.parametrize("config, words", [
    (b"{not json", "not JSON"), (b"[1]", "not a JSON object"), (b"\xff\xfe", "config.json"),
    ({**TINY, "hidden_size": -64}, "hidden_size"), ({**TINY, "model_type": "bert"}, "bert"),
])
def test_submit_refuses_a_config_json_that_is_not_one(tmp_path, config, words):
    with pytest.raises(BadInput, match=words):
        validate({**RUN, "model": model_folder(tmp_path, config)})


def test_submit_refuses_a_model_this_hosts_memory_cannot_hold(home, tmp_path):
    proc = submit(home, "--model", model_folder(tmp_path, LLAMA_405B))
    assert_refused(proc, home, "GB of host memory", "this host has")


def test_the_memory_check_is_the_launchers_hosts(tmp_path):
    from daemon.run.host_fit import Host

    with pytest.raises(BadInput, match="more than the 0.0 GB this host has"):
        validate({**RUN, "model": "tiny-llama"}, host=local(1000))
    with pytest.raises(BadInput, match=r"the pod's \[k8s\] memory has"):
        validate({**RUN, "model": "tiny-llama"}, host=Host("k8s", 1000, None))
    assert validate({**RUN, "model": "tiny-llama"}, host=Host("k8s", None, None))
    assert validate({**RUN, "model": "tiny-llama"}, host=local(16 << 30))


def test_edit_and_clone_refuse_a_model_the_host_cannot_hold(store, tmp_path):
    from daemon.scheduling.queueing import clone_run, edit_run

    run = store.add_run(validate(RUN))
    big = model_folder(tmp_path, LLAMA_405B)
    with pytest.raises(BadInput, match="GB of host memory"):
        edit_run(store, run, [f"model={big}"], host=local(64 << 30))
    with pytest.raises(BadInput, match="GB of host memory"):
        clone_run(store, run, [f"model={big}"], host=local(64 << 30))
    assert store.run(run)["config"]["model"] == "tiny-llama" and len(store.runs()) == 1


# === --seq-len past the positions (33) =======================================


def test_submit_refuses_a_seq_len_past_a_named_models_positions(home):
    assert_refused(submit(home, "--seq-len", "5000"), home, "--seq-len 5000", "2,048")


def test_a_seq_len_past_a_folders_positions_is_refused_and_edit_says_so_too(store, tmp_path):
    from daemon.scheduling.queueing import edit_run

    folder = model_folder(tmp_path, TINY)  # 256 positions
    assert validate({**RUN, "model": folder, "seq_len": 256})["seq_len"] == 256
    with pytest.raises(BadInput, match="past the 256 positions"):
        validate({**RUN, "model": folder, "seq_len": 257})
    run = store.add_run(validate(RUN))
    with pytest.raises(BadInput, match="--seq-len 5000 is past"):
        edit_run(store, run, ["seq-len=5000"])


# === a furiosa backend the local launcher cannot run (33) ====================


@pytest.fixture
def furiosa_torch(tmp_path, monkeypatch):
    """furiosa-torch's import path on sys.path: ``furiosa`` a namespace package (as it is
    installed), whose ``torch`` fails if anything imports it."""
    package = tmp_path / "site" / "furiosa" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('imported, and it must not be')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def test_submit_refuses_a_furiosa_backend_without_furiosa_torch_on_the_local_launcher(home):
    assert_refused(submit(home, "--backend", "furiosa:0"), home,
                   "furiosa-torch is not installed for", sys.executable, "k8s")


def test_a_furiosa_backend_is_accepted_where_its_package_or_the_image_is(furiosa_torch):
    from daemon.run.host_fit import Host, furiosa_torch_installed

    assert furiosa_torch_installed() and "furiosa.torch" not in sys.modules
    assert validate({**RUN, "backend": "furiosa:0"}, host=local(None))["backend"] == "furiosa:0"
    assert validate({**RUN, "backend": "furiosa:auto"}, host=Host("k8s", None, None))


def test_restart_all_failed_passes_over_a_run_that_could_never_run(store):
    from daemon.scheduling.queueing import restart_runs

    never = store.add_run({**RUN, "backend": "furiosa:0"})
    again = store.add_run(RUN)
    for run in (never, again):
        store.finish_run(run, "failed", reason="exit code 2")
    passed_over = []

    pairs = restart_runs(store, [], all_failed=True, host=local(None),
                         refused=lambda run, why: passed_over.append((run["id"], why)))

    assert [old for old, _ in pairs] == [again]
    [(run_id, why)] = passed_over
    assert run_id == never and why.startswith(f"run {never} not restarted: --backend furiosa:0")
    with pytest.raises(BadInput, match=f"run {never} not restarted"):
        restart_runs(store, [never], host=local(None))


def test_restart_all_failed_says_in_one_line_which_run_it_did_not_queue(home, store, rngdctl):
    never = store.add_run({**RUN, "backend": "furiosa:0"})
    store.finish_run(never, "failed", reason="exit code 2")
    code, out, err = rngdctl("restart", "--all-failed")
    assert code == 0 and out == "no run restarted\n"
    assert err.splitlines() == [err.strip()] and f"run {never} not restarted" in err
    assert [r["id"] for r in store.runs()] == [never]


# === unreadable paths, undecodable and oversized data (36.8, 36.9) ===========


@needs_mode_bits
@pytest.mark.parametrize("option, under", [
    ("--data", "data.jsonl"), ("--eval-data", "data.jsonl"), ("--model", "model"),
    ("--out", "out/run")])
def test_submit_refuses_a_path_under_a_folder_the_user_cannot_read(home, locked_dir, option,
                                                                   under):
    path = str(locked_dir / under)
    value = f"jsonl:{path}" if option.endswith("data") else path
    assert_refused(submit(home, option, value, bound=True), home, path, "Permission denied")


def test_submit_refuses_non_utf8_data_naming_the_line(home, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "\xc3("}\n')
    assert_refused(submit(home, "--data", str(path)), home, "d.jsonl:2: not UTF-8")


def test_submit_refuses_data_past_max_data_bytes_and_passes_the_bound_on(home, tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"text": "a review"}) + "\n", encoding="utf-8")
    assert_refused(submit(home, "--data", str(path), "--max-data-bytes", "10"), home,
                   "past --max-data-bytes 10")
    config = validate({**RUN, "data": str(path), "max_data_bytes": 4096})
    argv = trainer_argv({"id": 1, "config": config}, log_path=None, python="python")
    assert argv[argv.index("--max-data-bytes") + 1] == "4096"
