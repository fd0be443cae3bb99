"""`edit RUN --set key=value` (queued runs, submit's validation) and `clone RUN [--set ...]`."""

from __future__ import annotations

import json

import pytest

from daemon.errors import BadInput
from daemon.run.spec import validate
from daemon.scheduling.queueing import clone_run, edit_run


@pytest.fixture
def queued(store):
    def add(**options):
        config = validate({"cards": 1, "resident": 0, **options})
        return store.add_run(config, name=config.get("name"))
    return add


def test_edit_changes_a_queued_runs_config_and_stores_an_event(store, queued):
    run = queued(steps=200)

    edited, changes = edit_run(store, run, ["steps=500", "seq-len=256", "baseline=true"])

    assert (edited["config"]["steps"], edited["config"]["seq_len"]) == (500, 256)
    assert edited["config"]["baseline"] is True
    assert changes == {"steps": (200, 500), "seq_len": (512, 256), "baseline": (False, True)}
    [event] = store.events(run_id=run, kinds=["edit"])
    # In the stored config's key order (sorted).
    assert event["message"] == "edited: baseline False -> True, seq_len 512 -> 256, steps 200 -> 500"


def test_edit_validates_as_submit_does_and_changes_nothing_on_a_bad_value(store, queued):
    run = queued(steps=200)

    with pytest.raises(BadInput, match=r"--steps must be >= 1, got 0"):
        edit_run(store, run, ["steps=300", "steps=0"])
    with pytest.raises(BadInput, match=r"--model 'gpt-9' is neither a known model"):
        edit_run(store, run, ["model=gpt-9"])
    with pytest.raises(BadInput, match=r"--set seq_len=long: not a valid integer"):
        edit_run(store, run, ["seq_len=long"])
    with pytest.raises(BadInput, match=r"--set colour: not a setting"):
        edit_run(store, run, ["colour=red"])

    assert store.run(run)["config"]["steps"] == 200
    assert store.events(run_id=run, kinds=["edit"]) == []


def test_only_a_queued_run_can_be_edited(store, queued):
    run = queued()
    store.finish_run(run, "done")

    with pytest.raises(BadInput, match=f"run {run} is done: only a queued run can be edited"):
        edit_run(store, run, ["steps=5"])


def test_an_optional_setting_resets_to_its_default_with_an_empty_value(store, queued):
    run = queued(lora=8, deadline=600)

    edited, _ = edit_run(store, run, ["lora=", "deadline="])

    assert edited["config"]["lora"] is None and edited["config"]["deadline"] is None


def test_editing_the_name_renames_the_run(store, queued):
    run = queued(name="first")

    edit_run(store, run, ["name=second"])

    assert store.run("second")["id"] == run


def test_clone_queues_a_copy_of_a_finished_run_with_its_changes(store, queued):
    old = queued(steps=200, lr=1e-5, name="r1")
    store.update_run(old, priority=2)
    store.finish_run(old, "failed", reason="boom")

    new, changes = clone_run(store, old, ["lr=2e-5"])

    copy = store.run(new)
    assert copy["status"] == "queued" and copy["priority"] == 2 and copy["name"] == "r1-2"
    assert copy["config"] == {**store.run(old)["config"], "lr": 2e-5, "name": "r1-2"}
    assert changes == {"lr": (1e-5, 2e-5), "name": ("r1", "r1-2")}
    [event] = store.events(run_id=new, kinds=["clone"])
    assert event["data"]["from"] == old


# === the CLI =================================================================


def test_edit_prints_what_changed_and_json_gives_the_config(cli, queued):
    run = queued(steps=200)

    assert cli("edit", str(run), "--set", "steps=300").output == (
        f"run {run} edited: steps 200 -> 300\n")
    data = json.loads(cli("edit", str(run), "--set", "accum=2", "--json").output)
    assert data["changes"] == {"accum": {"old": 4, "new": 2}}
    assert data["config"]["steps"] == 300


def test_clone_prints_the_new_id_like_submit(cli, store, queued):
    old = queued()

    result = cli("clone", str(old), "--set", "seed=3")

    new = int(result.output)
    assert new != old and store.run(new)["config"]["seed"] == 3


def test_edit_with_a_bad_value_is_one_line_and_exit_2(rngdctl, queued):
    run = queued()
    code, out, err = rngdctl("edit", str(run), "--set", "lr=2")
    assert (code, out, err) == (2, "", "Error: --lr must be in (0, 1), got 2.0\n")


def test_edit_without_a_setting_is_one_line_and_exit_2(rngdctl, queued):
    run = queued()
    code, out, err = rngdctl("edit", str(run))
    assert (code, out, err) == (2, "", "Error: give at least one --set key=value\n")


# === a name is one run's (issue 33) =============================================


def test_submit_refuses_a_name_another_run_has_in_one_line(store, rngdctl, queued):
    first = queued(name="sweep")
    store.finish_run(first, "done")

    code, out, err = rngdctl("submit", "--cards", "1", "--name", "sweep")

    assert (code, out) == (2, "")
    assert err == (f"Error: --name 'sweep' is run {first}'s already: a name is one run's; give "
                   f"another (`rngdctl clone {first}` names its copy sweep-2)\n")
    assert [r["id"] for r in store.runs()] == [first]


def test_clone_names_each_copy_with_the_next_free_number(store, rngdctl, queued):
    first = queued(name="sweep")

    copies = [int(rngdctl("clone", str(first))[1]) for _ in range(3)]

    assert [store.run(c)["name"] for c in copies] == ["sweep-2", "sweep-3", "sweep-4"]
    code, out, _ = rngdctl("show", "sweep")
    assert code == 0 and out.startswith(f"run {first} (sweep): queued")


def test_a_name_set_on_clone_or_edit_may_not_be_another_runs(store, queued):
    first, second = queued(name="a"), queued(name="b")

    with pytest.raises(BadInput, match=f"--name 'a' is run {first}'s already"):
        edit_run(store, second, ["name=a"])
    with pytest.raises(BadInput, match=f"--name 'b' is run {second}'s already"):
        clone_run(store, first, ["name=b"])
    edit_run(store, second, ["name=b", "steps=7"])  # its own name: no change, no refusal
    assert [store.run(r)["name"] for r in (first, second)] == ["a", "b"]


def test_a_copys_number_fits_the_longest_name(store, queued):
    longest = "n" * 63
    first = queued(name=longest)

    new, _ = clone_run(store, first, [])

    assert store.run(new)["name"] == "n" * 61 + "-2"


# === a name of digits reads as a run id (issue 36, item 14) =====================


@pytest.mark.parametrize("name", ["2", "007"])
def test_a_name_of_digits_only_is_refused_at_submit(rngdctl, name):
    code, out, err = rngdctl("submit", "--cards", "1", "--resident", "0", "--name", name)

    assert (code, out) == (2, "")
    assert err.splitlines() == [(f"Error: --name '{name}': a name of digits only reads as a "
                                f"run id; add a letter (run-{name})")]


def test_a_name_of_digits_only_is_refused_at_edit_and_clone(store, queued):
    run = queued(name="first")

    with pytest.raises(BadInput, match="a name of digits only reads as a run id"):
        edit_run(store, run, ["name=2"])
    with pytest.raises(BadInput, match="a name of digits only reads as a run id"):
        clone_run(store, run, ["name=12"])
    assert store.run(run)["name"] == "first"


def test_a_name_with_digits_and_a_letter_is_a_name(store, queued):
    run = queued(name="first")

    edit_run(store, run, ["name=2b"])

    assert store.run("2b")["id"] == run
