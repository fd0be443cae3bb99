"""A run's output as show reads it from the store: the model folder, checkpoints, resumes
and the held-out loss (issue 26). Record lines go through the real ingest."""

import json

import pytest

from daemon.run import output
from daemon.run.ingest import Ingest
from tests.conftest import claim_as_saved
from trainer import records

CONFIG = {"cards": 1, "resident": 2, "steps": 130, "model": "tiny-llama"}


def lines(*recs):
    return [records.dumps(r) for r in recs]


def steps(first, last, t0):
    """Steps first..last of the main pass, one a second from t0 (loss: a function of the step,
    as a resumed trainer gives it again bit for bit)."""
    return [records.Step(records.MAIN, n, 3.0 - n / 100, 0.5, 128, 1e-3, time=t0 + n)
            for n in range(first, last + 1)]


def checkpoint(out, step, t):
    return records.Event(records.CHECKPOINT, f"checkpoint at step {step}",
                         data={"path": f"{out}/checkpoints/step-{step}", "step": step,
                               "position": {records.MAIN: step}}, time=t)


def resume(out, step, t, position=None):
    return records.Event(records.RESUME, f"resumed from step {step}",
                         data={"path": f"{out}/checkpoints/step-{step}", "step": step,
                               "position": position or {records.MAIN: step}, "seconds": 0.4},
                         time=t)


@pytest.fixture
def killed_twice(store, tmp_path):
    """A run killed at step 70 (checkpoint at 50) and at step 130 (checkpoint at 100), resumed
    each time, that saved its model at the end: three processes' lines, in order."""
    out = tmp_path / "out"
    run = store.add_run({**CONFIG, "out": str(out)})
    ingest = Ingest(store)
    ingest.feed(run, lines(records.Start(records.MAIN, CONFIG, time=0.0), *steps(1, 50, 0.0),
                           checkpoint(out, 50, 50.5), *steps(51, 70, 0.0)))
    ingest.feed(run, lines(resume(out, 50, 1000.0), *steps(51, 100, 1000.0),
                           checkpoint(out, 100, 1100.5), *steps(101, 130, 1000.0)))
    ingest.feed(run, lines(resume(out, 100, 2000.0), *steps(101, 130, 2000.0),
                           records.Event(records.SAVED, "model saved",
                                         data={"path": str(out), "format": "full",
                                               "bytes": 2_400_000}, time=2131.0)))
    (out / "checkpoints" / "step-100").mkdir(parents=True)  # step 50's: deleted (keep 1)
    claim_as_saved(store, run, out)
    return run, out


def test_each_resume_says_the_step_it_went_on_from_and_the_steps_it_trained_again(
        store, killed_twice):
    run, _ = killed_twice
    found = output.run_output(store, store.run(run))
    assert [(r.from_step, r.steps_redone) for r in found.resumes] == [(50, 20), (100, 30)]
    assert found.steps_redone == 50
    assert store.step_counts(run) == {records.MAIN: 130}  # every step stored once


def test_a_resume_counts_the_steps_of_each_pass_its_checkpoint_held(store, tmp_path):
    run = store.add_run(CONFIG)
    base = [records.Step(records.BASELINE, n, 3.0, 0.5, 128, 1e-3, time=float(n))
            for n in range(1, 13)]
    Ingest(store).feed(run, lines(*base, *steps(1, 14, 0.0),
                                  resume(tmp_path, 10, 500.0, {records.MAIN: 10,
                                                               records.BASELINE: 10})))
    (again,) = output.run_output(store, store.run(run)).resumes
    assert again.redone_by_pass == {records.MAIN: 4, records.BASELINE: 2}
    assert output.resume_words(again) == "from step 10, 4 steps again (and 2 of the baseline pass)"


def test_the_checkpoints_say_which_are_still_on_disk(store, killed_twice):
    run, out = killed_twice
    found = output.run_output(store, store.run(run))
    assert [(c.step, c.on_disk) for c in found.checkpoints] == [(50, False), (100, True)]
    assert found.newest_checkpoint().path == str(out / "checkpoints" / "step-100")


def test_before_the_model_is_saved_the_folder_is_the_one_the_run_was_given(home, store):
    run = store.add_run(CONFIG)
    model = output.run_output(store, store.run(run)).model
    assert model.path == str(home.path / "runs" / str(run) / "model")
    assert (model.written, model.format) == (False, output.FULL)


def test_the_newest_saved_event_names_the_folder_and_what_it_holds(store, tmp_path):
    run = store.add_run({**CONFIG, "lora": 8, "merge": True})
    Ingest(store).feed(run, lines(
        records.Event(records.SAVED, "saved", data={"path": "/old", "format": "full"}, time=1.0),
        records.Event(records.SAVED, "saved", data={"path": str(tmp_path), "format": "merged"},
                      time=2.0)))
    model = output.run_output(store, store.run(run)).model
    assert (model.path, model.written, model.format, model.on_disk) == (
        str(tmp_path), True, output.MERGED, True)
    assert model.load_line() == ("from transformers import AutoModelForCausalLM; model = "
                                 f"AutoModelForCausalLM.from_pretrained({str(tmp_path)!r})")


def test_a_peft_adapter_loads_onto_the_base_model_its_adapter_config_names(store, tmp_path):
    run = store.add_run({**CONFIG, "lora": 8})
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "/models/llama-3.1-8b"}))
    Ingest(store).feed(run, lines(records.Event(
        records.SAVED, "saved", data={"path": str(tmp_path), "format": "peft"}, time=1.0)))
    model = output.run_output(store, store.run(run)).model
    assert model.load_line() == (
        "from peft import PeftModel; from transformers import AutoModelForCausalLM; model = "
        "PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained('/models/llama-3.1-8b'),"
        f" {str(tmp_path)!r})")


def test_a_named_models_adapter_loads_onto_the_base_written_beside_it(store, tmp_path):
    run = store.add_run({**CONFIG, "lora": 8})  # tiny-llama: its base exists nowhere else
    (tmp_path / "base").mkdir()
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path":
                                                              "base"}))
    Ingest(store).feed(run, lines(records.Event(
        records.SAVED, "saved", data={"path": str(tmp_path), "format": "peft"}, time=1.0)))
    assert output.run_output(store, store.run(run)).model.base == str(tmp_path / "base")
    unseen = store.add_run({**CONFIG, "lora": 8})  # a volume this host does not mount
    Ingest(store).feed(unseen, lines(records.Event(
        records.SAVED, "saved", data={"path": "/rngdctl/runs/9/model", "format": "peft"},
        time=1.0)))
    assert output.run_output(store, store.run(unseen)).model.base == "/rngdctl/runs/9/model/base"


def test_the_held_out_loss_gives_its_last_and_its_lowest(store):
    run = store.add_run(CONFIG)
    Ingest(store).feed(run, lines(*(records.Eval(records.MAIN, s, loss, 4096, 64, 0.5)
                                    for s, loss in ((0, 3.0), (50, 2.2), (100, 2.3)))))
    held = output.held_out(store, run)
    assert (held.last["step"], held.best["step"], held.last_in(1, 60)["step"]) == (100, 50, 50)
    assert output.held_out_words(held) == (
        "last 2.3000 (perplexity 9.974) at step 100, lowest 2.2000 (perplexity 9.025) at "
        "step 50, 3 evaluations")


# === show ====================================================================


def test_show_json_names_the_output_the_resumes_and_the_held_out_series(
        store, killed_twice, rngdctl):
    run, out = killed_twice
    Ingest(store).feed(run, lines(records.Eval(records.MAIN, 130, 1.9, 4096, 64, 0.5)))
    code, text, _ = rngdctl("show", str(run), "--json")
    shown = json.loads(text)
    assert code == 0
    assert shown["output"]["model_dir"] == str(out)
    assert [(c["step"], c["on_disk"]) for c in shown["output"]["checkpoints"]] == [
        (50, False), (100, True)]
    assert shown["resumes"]["count"] == 2
    assert [(r["from_step"], r["steps_redone"]) for r in shown["resumes"]["each"]] == [
        (50, 20), (100, 30)]
    assert (shown["evals"]["last"]["loss"], shown["evals"]["count"]) == (1.9, 1)


def test_show_says_where_the_model_is_how_to_load_it_and_what_resuming_cost(
        killed_twice, rngdctl):
    run, out = killed_twice
    _, text, _ = rngdctl("show", str(run))
    assert f"output: {out} (full weights, 2.4 MB)" in text
    assert f"load: from transformers import AutoModelForCausalLM; model = " \
           f"AutoModelForCausalLM.from_pretrained({str(out)!r})" in text
    assert "resumed 2 times: from step 50, 20 steps again; from step 100, 30 steps again" in text


def test_show_of_a_queued_run_names_the_folder_it_will_write(home, store, rngdctl):
    run = store.add_run(CONFIG)
    _, text, _ = rngdctl("show", str(run))
    assert f"output: {home.path / 'runs' / str(run) / 'model'} (full weights, not written yet)" \
        in text
    assert "resumed" not in text and "held-out" not in text
