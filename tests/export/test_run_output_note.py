"""What the note says a run delivered: its model and how to load it, its resumes, and the
held-out loss in the loss table (issue 26). The output's records go through the real ingest."""

from __future__ import annotations

from recorded import T0, drifting_steps

from daemon.run.ingest import Ingest
from rngdctl.export import write_note
from tests.conftest import claim_as_saved
from trainer import records

#: The held-out loss every 20 steps of drifting_steps' 60 (timed with the steps).
EVALS = {0: 3.60, 20: 3.10, 40: 2.70, 60: 2.75}


def note_for(store, run_id, tmp_path) -> str:
    return write_note(store, [run_id], tmp_path / "experiments", now=T0).read_text()


def feed(store, run_id, *recs) -> None:
    Ingest(store).feed(run_id, [records.dumps(r) for r in recs])


def evals():
    return [records.Eval(records.MAIN, step, loss, 8192, 100, 1.5, time=T0 + 100 + step)
            for step, loss in EVALS.items()]


def test_the_loss_table_has_each_ranges_newest_held_out_loss_beside_the_train_loss(
        store, recorded, tmp_path):
    run = recorded(drifting_steps())
    feed(store, run, *evals())
    text = note_for(store, run, tmp_path)
    assert ("| steps | mean loss | median step | held-out loss |\n| --- | --- | --- | --- |\n"
            "| 1–25 | 3.020 | 2.00 s | 3.100 (step 20) |\n"
            "| 26–50 | 2.500 (1 non-finite left out) | 2.20 s | 2.700 (step 40) |\n"
            "| 51–60 | 2.000 | 2.20 s | 2.750 (step 60) |\n") in text
    assert ("- Held-out loss over 100 examples (8,192 tokens): 3.6000 before the first step, "
            "2.7500 after step 60 (perplexity 15.64); the lowest was 2.7000 at step 40. "
            "4 evaluations took 6.00 s in all, outside every step's time.") in text


def test_a_run_without_a_held_out_loss_keeps_its_three_column_table(store, recorded, tmp_path):
    text = note_for(store, recorded(drifting_steps()), tmp_path)
    assert "| steps | mean loss | median step |\n| --- | --- | --- |\n" in text
    assert "held-out" not in text.lower()


def test_the_note_says_where_the_model_is_and_gives_the_line_that_loads_it(store, recorded,
                                                                           tmp_path):
    out = tmp_path / "r60-model"
    run = recorded(drifting_steps())
    claim_as_saved(store, run, out)
    feed(store, run, records.Event(records.SAVED, "model saved", data={
        "path": str(out), "format": "full", "bytes": 1_300_000_000}, time=T0 + 161))
    text = note_for(store, run, tmp_path)
    assert (f"- Model: saved to `{out}` (full weights, 1.3 GB). Load it with `from transformers "
            f"import AutoModelForCausalLM; model = AutoModelForCausalLM.from_pretrained("
            f"{str(out)!r})`.") in text
    assert "- It never resumed from a checkpoint." in text


def test_a_peft_adapter_is_loaded_onto_its_base_model(store, recorded, tmp_path):
    run = recorded(drifting_steps(), config={"lora": 8, "model": "/models/qwen2-0.5b"})
    adapter = tmp_path / "adapter"
    claim_as_saved(store, run, adapter)
    feed(store, run, records.Event(records.SAVED, "adapter saved", data={
        "path": str(adapter), "format": "peft"}, time=T0 + 161))
    text = note_for(store, run, tmp_path)
    assert ("Load it with `from peft import PeftModel; from transformers import "
            "AutoModelForCausalLM; model = PeftModel.from_pretrained(AutoModelForCausalLM."
            f"from_pretrained('/models/qwen2-0.5b'), {str(adapter)!r})`.") in text


def test_the_note_says_how_often_the_run_resumed_and_what_each_resume_cost(store, recorded,
                                                                           tmp_path):
    run = recorded(drifting_steps())  # steps n stored at T0 + 100 + n
    feed(store, run,
         records.Event(records.CHECKPOINT, "step 20", data={"path": "/o/checkpoints/step-20",
                                                            "step": 20}, time=T0 + 120.5),
         records.Event(records.RESUME, "from step 20", data={"path": "/o/checkpoints/step-20",
                                                             "step": 20}, time=T0 + 133.5),
         records.Event(records.RESUME, "from step 40", data={"path": "/o/checkpoints/step-40",
                                                             "step": 40}, time=T0 + 150.5))
    text = note_for(store, run, tmp_path)
    assert ("- Resumed 2 times: from step 20, 13 steps again; from step 40, 10 steps again: "
            "23 steps trained twice in all.") in text
    assert "- Checkpoints: 1 written, 0 still on disk seen from here." in text
    went_wrong = text.split("## What went wrong")[1].split("## Data")[0]
    assert "resume: from step 20" in went_wrong and "checkpoint" not in went_wrong


def test_a_run_that_ended_without_saving_says_its_model_was_not_written(store, recorded,
                                                                        tmp_path, home):
    run = recorded(drifting_steps(), status="failed", reason="trainer exited 1")
    text = note_for(store, run, tmp_path)
    assert (f"- Model: not written; its folder was `{home.path / 'runs' / str(run) / 'model'}`."
            in text)


def test_the_step_log_keeps_the_eval_records_and_reads_back_the_same(store, recorded,
                                                                     tmp_path):
    run = recorded(drifting_steps())
    feed(store, run, *evals())
    write_note(store, [run], tmp_path / "experiments", now=T0)
    (log,) = (tmp_path / "experiments" / "data").glob("*/*.jsonl")
    again = store.add_run({"cards": 1})
    Ingest(store).feed(again, log.read_text().splitlines())
    assert store.evals(again) == store.evals(run)
