"""A run's output folder is that run's alone (issues 33 and 36): submit, edit, clone and
restart refuse another run's folder, and show, the TUI and the note name a model only when
its rngdctl.json still says it is this run's."""

from __future__ import annotations

import json
import sqlite3

import pytest

from daemon.errors import BadInput
from daemon.run import output
from daemon.run.ingest import Ingest
from daemon.run.spec import validate
from daemon.store import MIGRATIONS, Store
from tests.conftest import as_nobody, claim_as_saved, needs_nobody
from trainer import ownership, records

SUBMIT = ["--cards", "1", "--resident", "1", "--steps", "5"]
CONFIG = {"cards": 1, "resident": 1, "steps": 5}


def submitted(rngdctl, *extra) -> tuple[int, str]:
    """(exit code, stderr) of ``rngdctl submit`` with ``extra``."""
    code, _, err = rngdctl("submit", *SUBMIT, *extra)
    return code, err


# === the home's id ===========================================================


def test_each_home_gets_its_own_random_id_that_stays(tmp_path):
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        first, other = a.home_id, b.home_id
    with Store(tmp_path / "a.db") as again:
        assert again.home_id == first
    assert first != other and len(first) == 16


def test_a_store_made_before_home_ids_gets_one_when_opened(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for version in range(1, 14):  # a store as rngdctl left it before version 14
        for statement in MIGRATIONS[version]:
            statement(conn) if callable(statement) else conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '13')")
    conn.close()
    with Store(path) as store:
        assert len(store.home_id) == 16


def test_the_launchers_pass_the_home_id_and_the_run_id_to_the_trainer(store):
    from daemon.run.spec import trainer_argv

    argv = trainer_argv({"id": 7, "config": validate(CONFIG)}, log_path=None, python="python",
                        out_dir="/x", home_id=store.home_id, output_mode="0750")
    text = " ".join(argv)
    assert f"--run-id 7 --home-id {store.home_id}" in text
    assert "--output-mode 0750" in text


# === submit, edit, clone, restart ============================================


def test_two_runs_given_the_same_out_are_refused_naming_the_first(rngdctl, tmp_path):
    out = tmp_path / "shared"
    assert submitted(rngdctl, "--out", str(out))[0] == 0
    code, err = submitted(rngdctl, "--out", str(out))
    assert code == 2 and err.count("\n") == 1
    assert f"--out {out} is the output folder of run 1 (queued)" in err


def test_an_out_inside_another_runs_folder_or_holding_it_is_refused(rngdctl, tmp_path):
    out = tmp_path / "models" / "first"
    assert submitted(rngdctl, "--out", str(out))[0] == 0
    code, err = submitted(rngdctl, "--out", str(out / "base"))
    assert code == 2 and f"is inside {out}, the output folder of run 1" in err
    code, err = submitted(rngdctl, "--out", str(out.parent))
    assert code == 2 and f"holds {out}, the output folder of run 1" in err


def test_an_out_inside_the_homes_run_folders_is_refused(rngdctl, home):
    assert submitted(rngdctl)[0] == 0  # run 1: HOME/runs/1/model, its default
    for inside in (home.path / "runs" / "1" / "model", home.path / "runs" / "2" / "model"):
        code, err = submitted(rngdctl, "--out", str(inside))
        assert code == 2 and f"is inside {home.path / 'runs'}, where each run's own" in err


def test_a_users_own_folder_with_files_is_refused_and_kept_byte_for_byte(rngdctl, tmp_path):
    mine = tmp_path / "my-model"
    mine.mkdir()
    (mine / "config.json").write_bytes(b'{"mine": true}\n')
    code, err = submitted(rngdctl, "--out", str(mine))
    assert code == 2 and err.count("\n") == 1
    assert "is not empty and no rngdctl run claims it (config.json is there)" in err
    assert (mine / "config.json").read_bytes() == b'{"mine": true}\n'


@pytest.mark.parametrize("where", ["", "/", "~", "/etc", "HOME"])
def test_no_system_folder_home_folder_or_empty_path_is_an_out(rngdctl, home, where):
    where = str(home.path) if where == "HOME" else where
    code, err = submitted(rngdctl, "--out", where)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_a_place_that_cannot_be_written_is_refused_at_submit(rngdctl, tmp_path):
    (tmp_path / "a-file").write_text("x")
    code, err = submitted(rngdctl, "--out", str(tmp_path / "a-file" / "out"))
    assert code == 2 and f"{tmp_path / 'a-file'} is a file, not a folder" in err


def test_a_folder_another_run_claims_on_disk_is_refused_naming_it(rngdctl, tmp_path):
    out = tmp_path / "theirs"
    ownership.claim(out, ownership.Owner("9", "another-home"))
    code, err = submitted(rngdctl, "--out", str(out))
    assert code == 2 and "holds the output of run 9 of rngdctl home another-home" in err


def test_edit_refuses_another_runs_out(rngdctl, tmp_path):
    out = tmp_path / "first"
    submitted(rngdctl, "--out", str(out))
    submitted(rngdctl)
    code, _, err = rngdctl("edit", "2", "--set", f"out={out}")
    assert code == 2 and "is the output folder of run 1" in err
    assert rngdctl("edit", "2", "--set", f"out={tmp_path / 'own'}")[0] == 0


def test_clone_and_restart_write_to_their_own_folder_not_the_copied_runs(rngdctl, store,
                                                                         tmp_path):
    out = tmp_path / "first"
    submitted(rngdctl, "--out", str(out))
    code, new, err = rngdctl("clone", "1")
    assert code == 0 and f"--out {out} stays run 1's" in err
    assert store.run(int(new))["config"]["out"] is None  # HOME/runs/<id>/model
    code, _, err = rngdctl("clone", "1", "--set", f"out={out}")
    assert code == 2 and "is the output folder of run 1" in err
    store.finish_run(1, "failed", reason="boom")
    code, text, _ = rngdctl("restart", "1")
    assert code == 0 and f"--out {out} stays run 1's" in text
    assert store.run(store.restarts_of(1)[-1])["config"].get("out") is None


def test_the_store_checks_an_out_in_one_query_whatever_the_runs(store, tmp_path):
    from daemon.run.claims import check_run_output

    def queries(runs: int) -> int:
        for _ in range(runs):
            store.add_run({**CONFIG, "out": str(tmp_path / f"run-{store.add_run(CONFIG)}")})
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        check_run_output(store, validate({**CONFIG, "out": str(tmp_path / "new")}))
        store.conn.set_trace_callback(None)
        return len(statements)

    store.home_id  # noqa: B018 - read once for the home: not a query per check
    assert queries(10) == queries(1000) == 1


@needs_nobody
def test_a_folder_another_user_made_is_refused_at_submit(rngdctl, shared_tmp):
    as_nobody("mkdir", "-m", "755", str(shared_tmp / "planted"))
    code, err = submitted(rngdctl, "--out", str(shared_tmp / "planted"))
    assert code == 2 and "belongs to nobody" in err


def test_the_library_refuses_in_one_line(store, tmp_path):
    from daemon.run.claims import check_run_output

    store.add_run(validate({**CONFIG, "out": str(tmp_path / "a")}))
    with pytest.raises(BadInput, match="the output folder of run 1"):
        check_run_output(store, validate({**CONFIG, "out": str(tmp_path / "a")}))


# === show, show --json, the TUI and the note =================================

SHA = {"model.safetensors": "ab" * 32}


@pytest.fixture
def saved_run(store, tmp_path):
    """A done run that saved its model to OUT (rngdctl.json naming it, as the trainer does)."""
    out = tmp_path / "out"
    run = store.add_run({**CONFIG, "out": str(out)})
    Ingest(store).feed(run, [records.dumps(r) for r in (
        records.Start(records.MAIN, CONFIG, time=1.0),
        records.Step(records.MAIN, 1, 3.0, 0.5, 128, 1e-3, time=2.0),
        records.Event(records.SAVED, "saved", data={"path": str(out), "format": "full",
                                                     "files": SHA, "bytes": 10}, time=3.0))])
    store.finish_run(run, "done")
    claim_as_saved(store, run, out, SHA)
    return run, out


def overwrite(store, out, run_id: int, files=SHA) -> None:
    """What a second run writing into OUT leaves there: its own rngdctl.json."""
    claim_as_saved(store, run_id, out, files)


def test_a_folder_still_as_the_run_saved_it_is_named_with_its_load_line(saved_run, rngdctl):
    run, out = saved_run
    shown = json.loads(rngdctl("show", str(run), "--json")[1])["output"]
    assert (shown["state"], shown["writer"]) == ("ok", None)
    assert shown["load"].endswith(f"from_pretrained({str(out)!r})")
    assert "load: from transformers" in rngdctl("show", str(run))[1]


def test_show_json_says_overwritten_with_the_writers_run_and_gives_no_load_line(
        store, saved_run, rngdctl):
    run, out = saved_run
    overwrite(store, out, 2)
    shown = json.loads(rngdctl("show", str(run), "--json")[1])["output"]
    assert (shown["state"], shown["writer"], shown["load"]) == ("overwritten", "2", None)
    _, text, _ = rngdctl("show", str(run))
    assert "overwritten: run 2 of this home wrote over it; not this run's model" in text
    assert "load:" not in text


def test_weights_other_than_the_saved_ones_are_not_this_runs(store, saved_run):
    run, out = saved_run
    overwrite(store, out, run, {"model.safetensors": "cd" * 32})
    model = output.run_output(store, store.run(run)).model
    assert (model.state, model.ours) == ("overwritten", False)
    assert "names other weights than this run saved" in model.detail


def test_a_folder_without_its_claim_is_missing_and_never_loaded(store, saved_run):
    run, out = saved_run
    (out / ownership.CLAIM_NAME).unlink()
    model = output.run_output(store, store.run(run)).model
    assert (model.state, model.ours) == ("missing", False)
    assert "its rngdctl.json is gone" in output.model_words(output.run_output(
        store, store.run(run)), finished=True)


def test_a_planted_claim_that_is_no_file_is_read_without_hanging(store, saved_run):
    import os

    run, out = saved_run
    (out / ownership.CLAIM_NAME).unlink()
    os.mkfifo(out / ownership.CLAIM_NAME)
    model = output.run_output(store, store.run(run)).model
    assert model.state == "missing" and "not a regular file" in model.detail


def test_the_tui_says_the_model_was_overwritten(store, home, saved_run):
    from rngdctl.tui.data import ViewSource

    run, out = saved_run
    source = ViewSource(store, home=home.path, run_ref=run)
    assert "overwritten" not in source.build().current.output
    overwrite(store, out, 2)  # no event in this store: the TUI sees the claim change
    assert "overwritten: run 2 of this home wrote over it" in source.build().current.output


def test_the_note_says_the_model_was_overwritten_and_gives_no_load_line(store, saved_run,
                                                                         tmp_path):
    from rngdctl.export import write_note

    run, out = saved_run
    overwrite(store, out, 2)
    text = write_note(store, [run], tmp_path / "experiments").read_text()
    assert (f"Model: saved to `{out}` (full weights), now overwritten: run 2 of this home "
            "wrote over it; not this run's model.") in text
    assert "Load it with" not in text


# === the real daemon and trainer =============================================


@pytest.mark.slow
def test_a_second_homes_run_given_the_same_out_fails_at_start_and_the_first_stays(tmp_path):
    """Two homes know nothing of each other's runs: both submits are accepted, and the
    trainer's claim is what keeps the second run from writing over the first's model."""
    import subprocess
    import sys

    from daemon.home import Home

    out = tmp_path / "shared-model"
    homes = [Home(tmp_path / name).ensure() for name in ("home-a", "home-b")]

    def rngdctl(home, *args):
        return subprocess.run([sys.executable, "-m", "rngdctl", "--home", str(home.path),
                               *args], capture_output=True, text=True, timeout=300,
                              check=False)

    short = ["--cards", "1", "--resident", "1", "--steps", "3", "--seq-len", "16",
             "--accum", "1", "--out", str(out)]
    assert [rngdctl(h, "submit", *short).returncode for h in homes] == [0, 0]
    for home in homes:
        daemon = rngdctl(home, "daemon", "--tick", "0.2", "--exit-when-idle")
        assert daemon.returncode == 0, daemon.stderr
    with homes[0].store() as a, homes[1].store() as b:
        first, second = a.run(1), b.run(1)
        home_a = a.home_id
    assert (first["status"], second["status"]) == ("done", "failed")
    assert (f"--out {out} holds the output of run 1 of rngdctl home {home_a}"
            in second["exit_reason"])
    shown = json.loads(rngdctl(homes[0], "show", "1", "--json").stdout)["output"]
    assert (shown["state"], shown["model_dir"]) == ("ok", str(out))
    assert json.loads((out / ownership.CLAIM_NAME).read_text())["owner"]["home_id"] == home_a
