"""The experiment note: the numbers it reports, computed from a recorded store."""

from __future__ import annotations

import re

import pytest
from recorded import T0, drifting_steps, make_step

from daemon import stepmodel
from daemon.errors import BadInput, NoSuchRun
from daemon.home import K8sConfig
from rngdctl.export import percent, secs, write_note


def note_for(store, run_ids, tmp_path, **kw):
    return write_note(store, run_ids, tmp_path / "experiments", now=T0, **kw).read_text()


def test_note_reports_medians_over_steps_6_to_n_tok_s_and_drift(store, recorded, tmp_path):
    text = note_for(store, [recorded(drifting_steps())], tmp_path)
    assert "- 60/60 steps, no OOM, on the first attempt. Host load was 1.5–3.0." in text
    assert "Step 6–60 median: 2.20 s/step, 58.2 tok/s." in text
    assert ("The steps 6–25 median was 2.00 s, so step time drifted by +10.0 % over the run; "
            "the slowest step (step 40) took 3.00 s.") in text


def test_loss_table_buckets_follow_the_run_length_and_leave_a_nan_out(store, recorded, tmp_path):
    text = note_for(store, [recorded(drifting_steps())], tmp_path)
    assert ("| steps | mean loss | median step |\n| --- | --- | --- |\n"
            "| 1–25 | 3.020 | 2.00 s |\n"
            "| 26–50 | 2.500 (1 non-finite left out) | 2.20 s |\n"
            "| 51–60 | 2.000 | 2.20 s |\n") in text
    assert "- Step 1 loss is 3.5000." in text
    assert "- 1 step had a non-finite loss (NaN), first at step 30" in text


def test_a_nan_step_1_loss_reads_nan_not_a_dash_or_a_crash(store, recorded, tmp_path):
    steps = [make_step(n, 1.0, float("nan") if n == 1 else 2.0) for n in range(1, 11)]
    text = note_for(store, [recorded(steps, config={"steps": 10})], tmp_path)
    assert "- Step 1 loss is NaN." in text
    assert "| 1–10 | 2.000 (1 non-finite left out) | 1.00 s |" in text


def test_steady_step_time_is_said_not_to_drift(store, recorded, tmp_path):
    steps = [make_step(n, 2.5 if n == 31 else 2.0, 1.0) for n in range(1, 41)]
    text = note_for(store, [recorded(steps, config={"steps": 40})], tmp_path)
    assert ("The steps 6–25 median was also 2.00 s, and the slowest step (step 31) took "
            "2.50 s, so step time did not drift.") in text


def test_the_pre_submit_checks_give_their_count_blockers_and_load_range(store, recorded,
                                                                        tmp_path):
    text = note_for(store, [recorded(drifting_steps(), gate_loads=(0.4, 12.0, 7.5))], tmp_path)
    assert ("- Pre-submit checks before each launch: host load (< 150), no process holding "
            "/dev/rngd (0 holders), cards free (n/a: local launcher: no Kubernetes cards to "
            "count). 3 checks, 2 blocked (no process holding /dev/rngd 2); the checks logged "
            "load 0.4–12.") in text


def test_verification_names_code_recipe_hardware_and_launch(store, recorded, tmp_path):
    config = {"deadline": 900, "data": "nsmc:/home/kim/nsmc/ratings_test.txt"}
    text = note_for(store, [recorded(drifting_steps(), config=config)], tmp_path)
    assert "- Code: git b3cb03b, torch 2.13.0." in text
    assert "- Recipe: tiny-llama, S=64, accum 2, lr 0.001, nsmc:ratings_test.txt, seed 0." in text
    assert "- Hardware: backend cpu, host box, no image digest (not a container run)." in text
    assert "one run at a time, deadline 900 s." in text


def test_an_older_k8s_run_without_job_data_takes_its_job_limits_from_the_config(
        store, recorded, tmp_path):
    run = recorded(drifting_steps(), config={"image": "furiosa-llm:latest"})
    store.update_run(run, launcher="k8s", node="npu-node-1", image_digest="sha256:37a85288")
    text = write_note(store, [run], tmp_path, now=T0, k8s=K8sConfig()).read_text()
    assert ("- Hardware: backend cpu, node npu-node-1, host box, image furiosa-llm:latest, "
            "image digest sha256:37a85288.") in text
    assert ("- Launch: one run-and-exit Kubernetes Job at a time, activeDeadlineSeconds 7200 "
            "(config.toml's [k8s] default_deadline), ttlSecondsAfterFinished 3600.") in text


def test_a_k8s_run_reports_the_limits_its_job_really_had_not_todays_config(store, recorded,
                                                                          tmp_path):
    run = recorded(drifting_steps(), config={"image": "furiosa-llm:latest"})
    store.update_run(run, launcher="k8s", node="npu-node-1", image_digest="sha256:37a85288")
    job = {"job": "rngd-1-a2", "namespace": "ml", "stage": "train", "node": "npu-node-1",
           "image": "registry.example/furiosa-llm:2026.1", "cards": 1,
           "activeDeadlineSeconds": 1800, "ttlSecondsAfterFinished": 600}
    store.add_event(run, "launch", "created compile Job", now=T0 + 11,
                    data={**job, "job": "rngd-1-a2-compile", "stage": "compile", "cards": 0})
    store.add_event(run, "launch", "created train Job", now=T0 + 12, data=job)
    changed = K8sConfig(default_deadline=60, ttl_seconds=5, image="other:1")
    text = write_note(store, [run], tmp_path, now=T0, k8s=changed).read_text()
    assert ("- Launch: one run-and-exit Kubernetes Job at a time, Job ml/rngd-1-a2 on node "
            "npu-node-1, activeDeadlineSeconds 1800, ttlSecondsAfterFinished 600.") in text
    assert "image registry.example/furiosa-llm:2026.1, image digest sha256:37a85288." in text


def test_a_run_with_no_steps_is_refused_in_one_line_before_anything_is_written(
        store, recorded, tmp_path):
    run = recorded([], status="failed", reason="exit 1: ImportError: no module named torch")
    with pytest.raises(BadInput, match=f"^run {run} ended failed with no step stored: nothing "
                                       f"to write up \\(`rngdctl show {run}` gives its reason"):
        note_for(store, [run], tmp_path)
    assert not (tmp_path / "experiments").exists()


def test_exporting_a_queued_run_is_refused_and_never_says_it_ended_queued(store, rngdctl,
                                                                         tmp_path):
    run = store.add_run({"cards": 1, "resident": 0, "steps": 5})
    code, out, err = rngdctl("export", str(run), "--out", str(tmp_path / "notes"))
    assert (code, out) == (2, "")
    assert err == (f"Error: run {run} is queued and has no step yet: export it once it has "
                   "run\n")
    assert not (tmp_path / "notes").exists()


def test_an_oom_run_says_oom_and_how_many_attempts(store, recorded, tmp_path):
    run = recorded(drifting_steps()[:12], status="oom")
    store.update_run(run, attempts=2)
    text = note_for(store, [run], tmp_path)
    assert "- 12/60 steps, OOM, after 2 attempts." in text


def test_several_runs_give_one_note_with_a_comparison_table(store, recorded, tmp_path):
    a = recorded(drifting_steps(), name="r60")
    steady = [make_step(n, 1.0, 2.0) for n in range(1, 31)]
    b = recorded(steady, name="t1c", config={"resident": 0, "steps": 30})
    path = write_note(store, [a, b], tmp_path / "experiments", now=T0)
    text = path.read_text()
    assert path.name == "2026-09-21-r60-t1c.md"
    assert "| r60 | 1 card × 2 resident layers | done | 60/60 | 2.20 s | 58.2 | 2.00 s |" in text
    assert "| t1c | 1 card, all offload | done | 30/30 | 1.00 s | 128 | 1.00 s |" in text
    assert f"## Run {a}: r60 — " in text and f"## Run {b}: t1c — " in text
    assert sorted(p.name for p in (tmp_path / "experiments/data/r60-t1c").glob("*.jsonl")) == [
        "r60.jsonl", "t1c.jsonl"]


def test_repeated_events_are_folded_into_one_line(store, recorded, tmp_path):
    events = [("gate_blocked", "device_idle: pid 4121 holds npu0pe0")] * 3 + [
        ("image_pull", "ImagePullBackOff: furiosa-llm:latest not found")]
    text = note_for(store, [recorded(drifting_steps(), events=events)], tmp_path)
    assert "- `+20s to +22s, 3 times` gate_blocked: device_idle: pid 4121 holds npu0pe0" in text
    assert "- `+23s` image_pull: ImagePullBackOff: furiosa-llm:latest not found" in text


def test_exporting_again_never_overwrites_the_first_note(store, recorded, tmp_path):
    run = recorded(drifting_steps())
    first = write_note(store, [run], tmp_path, now=T0)
    first.write_text("edited by hand")
    second = write_note(store, [run], tmp_path, now=T0)
    assert (first.name, second.name) == ("2026-09-21-r60.md", "2026-09-21-r60-2.md")
    assert first.read_text() == "edited by hand"
    assert (tmp_path / "data/r60-2/r60.jsonl").is_file()
    assert "[data/r60-2/](data/r60-2/)" in second.read_text()


def test_an_unknown_run_is_refused_before_anything_is_written(store, recorded, tmp_path):
    run = recorded(drifting_steps())
    with pytest.raises(NoSuchRun):
        write_note(store, [run, "nope"], tmp_path / "experiments", now=T0)
    assert not (tmp_path / "experiments").exists()


@pytest.mark.parametrize(("seconds", "shown"), [
    (4.4321, "4.43 s"), (0.0184, "18.4 ms"), (0.000032, "32.0 µs"), (1e-17, "0 s"),
    (None, "–"), (float("nan"), "–")])
def test_durations_read_in_seconds_milliseconds_or_microseconds(seconds, shown):
    assert secs(seconds) == shown


# === the step model ==========================================================

SHAPE = {"layers": 4, "cards": 1, "seq_len": 64, "accum": 2}
BASELINE_PHASES = {"fwd_bwd": 0.1, "upload": 0.08, "download": 0.08, "host_optim": 0.04,
                   "device_optim": 0.01, "wait": 0.0}
MAIN_PHASES = {"fwd_bwd": 0.1, "upload": 0.04, "download": 0.04, "host_optim": 0.02,
               "device_optim": 0.05, "wait": 0.0}


def baseline_run(recorded):
    steps = [make_step(n, 0.31, 3.0, label="baseline", phases=BASELINE_PHASES,
                       extra={**SHAPE, "resident_per_card": 0}) for n in range(1, 11)]
    steps += [make_step(n, 0.25, 3.0, phases=MAIN_PHASES,
                        extra={**SHAPE, "resident_per_card": 2}) for n in range(1, 31)]
    return recorded(steps, config={"steps": 30, "baseline": True},
                    baseline_config={"cards": 1, "resident": 0})


def test_a_run_with_a_baseline_gets_the_model_against_measured_table(store, recorded, tmp_path):
    # Terms from the baseline: T_dev 0.1, u = d = 0.01, h = 0.01, g0 = 0.01, g = h (estimated);
    # 2 of 4 layers offloaded at accum 2: 0.1 + 0.04 + 0.04 + 0.02 + 0.03 = 0.23 s.
    text = note_for(store, [baseline_run(recorded)], tmp_path)
    assert ("| run | step | measured as | tok/s | model | error |\n"
            "| --- | --- | --- | --- | --- | --- |\n"
            "| baseline (1 card, all offload) | 310 ms | median of steps 6-10 | 413 | – | – |\n"
            "| 1 card × 2 resident layers | 250 ms | median of steps 6-30 | 512 | 230 ms "
            "| -8.0 % |\n") in text
    assert "| device_optim | 10.0 ms | resident layer | estimated:" in text


def test_the_model_table_agrees_with_the_step_model_module(store, recorded, tmp_path):
    run = baseline_run(recorded)
    comparison = stepmodel.for_run(store, run)
    text = note_for(store, [run], tmp_path)
    assert (f"| {secs(comparison.measured_s)} | {comparison.measured_words} | 512 | "
            f"{secs(comparison.model_s)} | {percent(comparison.error)} |") in text


def test_a_baseline_without_phase_timings_says_why_there_is_no_model(store, recorded, tmp_path):
    steps = [make_step(n, 0.31, 3.0, label="baseline", extra={**SHAPE, "resident_per_card": 0})
             for n in range(1, 11)] + [make_step(n, 0.25, 3.0) for n in range(1, 31)]
    run = recorded(steps, config={"steps": 30, "baseline": True},
                   baseline_config={"cards": 1, "resident": 0})
    text = note_for(store, [run], tmp_path)
    assert "| 1 card × 2 resident layers | 250 ms | median of steps 6-30 | 512 | – | – |" in text
    assert "The step model gave no prediction: cannot fit: the baseline has no" in text


def test_a_long_run_keeps_a_short_loss_table_with_round_ranges(store, recorded, tmp_path):
    steps = [make_step(n, 1.0, 2.0) for n in range(1, 2001)]
    text = note_for(store, [recorded(steps, config={"steps": 2000})], tmp_path)
    table = text.split("| --- | --- | --- |\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [row.split(" | ")[0] for row in table] == [
        "| 1–25", "| 26–50", "| 51–100", "| 101–500", "| 501–1000", "| 1001–1500",
        "| 1501–2000"]


def test_what_went_wrong_lists_failures_retries_and_resumes_but_not_routine_events(
        store, recorded, tmp_path):
    events = [("placement", "card 0: layers 0-3, resident 2"),
              ("notify", "run 1 (r60) started"),
              ("settle", "11 untimed steps on a throwaway copy before the timed passes"),
              ("adopt", "daemon restarted; adopted pid 4242"),
              ("image_pull", "ImagePullBackOff: furiosa-llm:latest"),
              ("compile", "head graph compiled in 94.0 s on furiosa:0"),
              ("retry", "card held by another process at start: try 2 of 3"),
              ("resume", "resumed from step-20: main at step 20"),
              ("finished", "done")]
    text = note_for(store, [recorded(drifting_steps(), events=events)], tmp_path)
    section = text.split("## What went wrong\n\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == [
        "- `+24s` image_pull: ImagePullBackOff: furiosa-llm:latest",
        "- `+26s` retry: card held by another process at start: try 2 of 3",
        "- `+27s` resume: resumed from step-20: main at step 20"]


def test_a_clean_run_says_nothing_went_wrong(store, recorded, tmp_path):
    text = note_for(store, [recorded([make_step(1, 1.0, 2.0)], config={"steps": 1})], tmp_path)
    assert ("## What went wrong\n\nNothing: no failure, retry, resume or change of host was "
            "recorded.\n") in text


def test_a_failed_runs_end_is_listed_under_what_went_wrong(store, recorded, tmp_path):
    run = recorded(drifting_steps()[:7], status="failed", reason="exit 1",
                   events=[("end", "error: RuntimeError: boom"), ("finished", "failed: exit 1")])
    section = note_for(store, [run], tmp_path).split("## What went wrong\n\n", 1)[1]
    assert section.startswith("- `+20s` end: error: RuntimeError: boom\n"
                              "- `+21s` finished: failed: exit 1\n")


def test_the_code_line_names_furiosa_torch_and_the_rngd_driver_and_firmware(store, recorded,
                                                                            tmp_path):
    run_id = recorded(drifting_steps(), config={"backend": "furiosa:0"})
    store.update_run(run_id, versions={"torch": "2.10.0", "furiosa-torch": "2026.4.0",
                                       "rngd driver": "2026.4.0", "rngd firmware": "2026.4.0"})
    text = note_for(store, [run_id], tmp_path)
    assert ("- Code: git b3cb03b, furiosa-torch 2026.4.0, rngd driver 2026.4.0, "
            "rngd firmware 2026.4.0, torch 2.10.0.") in text


# === runs that resumed or were retried =========================================


def test_each_attempts_events_are_timed_from_its_own_launch_with_the_attempt_named(
        store, recorded, tmp_path):
    run = recorded(drifting_steps(), events=[
        ("end", "preempted: stopped by SIGTERM after main step 20"),
        ("retry", "stopped by a SIGTERM that was not rngdctl's: try 2 of 3")])
    store.add_event(run, "launch", "started pid 4343", now=T0 + 100)
    store.add_event(run, "resume", "resumed from step-20: main at step 20", now=T0 + 104)
    store.update_run(run, started=T0 + 100, attempts=2)  # the second claim's time
    text = note_for(store, [run], tmp_path)
    events = text.split("Events:\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert events == [
        "- `attempt 1 +0s` launch: started pid 4242",
        "- `attempt 1 +20s` end: preempted: stopped by SIGTERM after main step 20",
        "- `attempt 1 +21s` retry: stopped by a SIGTERM that was not rngdctl's: try 2 of 3",
        "- `attempt 2 +0s` launch: started pid 4343",
        "- `attempt 2 +4s` resume: resumed from step-20: main at step 20"]


def test_sections_are_headed_by_run_id_never_by_their_place_in_the_note(store, recorded,
                                                                         tmp_path):
    for _ in range(8):
        store.add_run({"cards": 1, "resident": 0, "steps": 5})
    a = recorded(drifting_steps(), name="r60")
    b = recorded([make_step(n, 1.0, 2.0) for n in range(1, 31)], name=None,
                 config={"resident": 0, "steps": 30})
    text = write_note(store, [a, b], tmp_path, now=T0).read_text()
    assert (a, b) == (9, 10)
    headings = [line for line in text.splitlines() if line.startswith("## Run")]
    assert headings == ["## Run 9: r60 — 1 card × 2 resident layers, 60 steps",
                        "## Run 10 — 1 card, all offload, 30 steps"]


def test_an_attempt_begins_at_its_start_notice_stored_before_its_launch(store, recorded,
                                                                        tmp_path):
    run = recorded(drifting_steps())  # launched at T0 + 10
    store.add_event(run, "notify", f"run {run} (r60) started", now=T0 + 9,
                    data={"on": "start", "status": "running"})
    text = note_for(store, [run], tmp_path)
    events = text.split("Events:\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert events[:2] == [f"- `+0s` notify: run {run} (r60) started",
                          "- `+1s` launch: started pid 4242"]


# === values in the note's markdown (issue 36, item 12) ==========================


def _structure(text: str) -> tuple[list[str], list[int]]:
    """The note's headings (a run's id made N: the two notes are of two runs), and the
    number of cells of each table row."""
    lines = text.splitlines()
    return ([re.sub(r"^## Run \d+", "## Run N", line) for line in lines if line.startswith("#")],
            [line.replace("\\|", "").count("|") for line in lines if line.startswith("|")])


def test_a_data_path_with_a_newline_and_a_pipe_leaves_the_notes_structure_unchanged(
        store, recorded, tmp_path):
    def note(data: str, reason: str, message: str, out: str) -> str:
        run = recorded(drifting_steps(), config={"data": data}, status="failed", reason=reason,
                       events=[("end", message), ("saved", f"model saved to {out}")])
        return note_for(store, [run], tmp_path / data[-1])

    plain = note("jsonl:/data/a.jsonl", "exit 1 and a line", "error: boom", "/m/a")
    hostile = note("jsonl:/data/a\n# Injected | x | y |\n|---|---|\na.jsonl",
                   "exit 1\n## Not a heading\n| not | a | row |",
                   "error: `boom\n# Injected", "/m/a\n# b`")

    assert _structure(hostile) == _structure(plain)
    assert "jsonl:a # Injected \\| x \\| y \\| \\|---\\|---\\| a.jsonl, seed 0." in hostile
    assert "status failed: exit 1 ## Not a heading \\| not \\| a \\| row \\|" in hostile
