import json
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("args, message", [
    (["--cards", "0", "--resident", "1"], "--cards must be >= 1, got 0"),
    (["--cards", "1", "--resident", "-1"], "--resident must be >= 0"),
    (["--cards", "1", "--resident", "1", "--steps", "0"], "--steps must be >= 1"),
    (["--cards", "1", "--resident", "1", "--model", "gpt-9"], "neither a known model"),
    (["--cards", "1", "--resident", "1", "--data", "nsmc:/nope.txt"], "no file at /nope.txt"),
    (["--cards", "1", "--resident", "1", "--backend", "tpu"], "--backend 'tpu'"),
    (["--cards", "two", "--resident", "1"], "'two' is not a valid integer"),
])
def test_bad_submit_values_get_one_line_and_exit_2(rngdctl, args, message):
    code, out, err = rngdctl("submit", *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert out == ""


def test_submit_prints_the_id_and_runs_lists_it(rngdctl):
    code, out, _ = rngdctl("submit", "--cards", "2", "--resident", "1", "--name", "r200")
    assert (code, out.strip()) == (0, "1")
    code, out, _ = rngdctl("runs", "--json")
    [run] = json.loads(out)
    assert (run["name"], run["status"], run["config"]["resident"]) == ("r200", "queued", 1)


def test_submit_json_is_an_object_with_the_validated_config(rngdctl):
    _, out, _ = rngdctl("submit", "--cards", "1", "--resident", "0", "--json")
    reply = json.loads(out)
    assert reply["id"] == 1 and reply["config"]["steps"] == 200


def test_show_of_an_unknown_run_is_one_line(rngdctl):
    code, _, err = rngdctl("show", "42")
    assert (code, err) == (2, "Error: no run '42'\n")


def test_cancel_of_a_queued_run_cancels_it_at_once(rngdctl):
    rngdctl("submit", "--cards", "1", "--resident", "0")
    assert rngdctl("cancel", "1")[1] == "run 1 cancelled\n"
    code, _, err = rngdctl("cancel", "1")
    assert (code, err) == (2, "Error: run 1 has already ended: cancelled\n")


def test_hold_release_and_move_reorder_the_queue(rngdctl):
    for _ in range(3):
        rngdctl("submit", "--cards", "1", "--resident", "0")
    assert rngdctl("move", "3", "1")[1] == "run 3 is now at position 1\n"
    rngdctl("hold", "3")
    _, out, _ = rngdctl("gates", "--json")
    assert json.loads(out)["run"] == 1


def test_gates_reads_the_probes_and_prints_every_gate(rngdctl):
    code, out, _ = rngdctl("gates")
    assert code == 0
    for name in ("host_load", "device_idle", "cards_free", "image_present", "one_at_a_time"):
        assert name in out


def test_a_config_file_with_a_bad_value_is_one_line(rngdctl, home):
    home.config_path.write_text("[gates]\nload_max = 'high'\n")
    code, _, err = rngdctl("gates")
    assert code == 2
    assert err == f"Error: {home.config_path}: [gates] load_max must be float, got 'high'\n"


def test_the_home_option_works_after_the_command_too(tmp_path):
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "rngdctl", "submit", "--home", str(other),
                    "--cards", "1", "--resident", "0"], check=True, capture_output=True, cwd=REPO)
    assert (other / "rngdctl.db").exists()


@pytest.mark.parametrize("command", [
    ["submit", "--cards", "1", "--resident", "0"], ["runs"], ["show", "1"],
])
def test_the_fast_commands_import_no_heavy_library(home, command):
    probe = (
        "import sys\n"
        "from rngdctl.cli import main\n"
        "try:\n"
        f"    main({['--home', str(home.path), *command]!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'torch', 'transformers', 'textual', 'kubernetes'} & set(sys.modules)\n"
        "print(sorted(heavy))\n"
    )
    subprocess.run([sys.executable, "-m", "rngdctl", "--home", str(home.path), "submit",
                    "--cards", "1", "--resident", "0"], check=True, capture_output=True, cwd=REPO)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_every_command_has_help_with_an_example():
    from rngdctl.cli import COMMANDS, cli

    for module, attr in COMMANDS:
        command = cli.get_command(None, attr.replace("_", "-"))
        assert command.help and "Example:" in command.help, attr


def test_submit_knows_exactly_the_models_and_layer_counts_the_trainer_builds():
    from daemon.run.spec import KNOWN_MODELS, MODEL_LAYERS
    from trainer.models import NAMED

    assert set(KNOWN_MODELS) == set(NAMED)
    assert MODEL_LAYERS == {name: kwargs["num_hidden_layers"] for name, (_, kwargs) in NAMED.items()}


def test_a_file_that_is_not_a_database_is_one_line_and_left_alone(rngdctl, home):
    home.db_path.write_text("not a database")
    code, _, err = rngdctl("runs")
    assert code == 1
    assert err.startswith("Error: cannot open the store") and "not a database" in err
    assert home.db_path.read_text() == "not a database"


def test_a_store_that_fails_after_it_opened_is_one_line(rngdctl, home):
    # A trigger refuses every new run, as a full disk would: the store opens, then fails.
    rngdctl("runs")  # creates the store
    with sqlite3.connect(home.db_path) as db:
        db.execute("CREATE TRIGGER full BEFORE INSERT ON runs "
                   "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    code, out, err = rngdctl("submit", "--cards", "1", "--resident", "0")
    assert (code, out, err) == (1, "", "Error: the store failed: database or disk is full\n")
