import json
import os

from daemon import stepmodel
from daemon.run.ingest import Ingest
from trainer import records


def passes(layers=4, resident=2, n=12, main_compute=0.100, main_jitter=0.0, backend=None):
    """A baseline and a main pass with known phase timings (main's fwd_bwd: ``main_compute``,
    wandering by +-``main_jitter`` of it from step to step), on ``backend`` if given."""
    lines = []
    for label, res in (("baseline", 0), ("main", resident)):
        config = {"cards": 1, "resident_layers": res, "layers": layers, "seq_len": 64,
                  "accum": 2, **({"backend": backend} if backend else {})}
        lines.append(records.dumps(records.Start(label, config, time=0.0)))
        offloaded = layers - res
        for i in range(1, n + 1):
            jitter = 1 + main_jitter * (-1, -0.5, 0, 0.5, 1)[i % 5] if label == "main" else 1
            phases = {"fwd_bwd": main_compute * jitter if label == "main" else 0.100,
                      "upload": 0.002 * offloaded,
                      "download": 0.001 * offloaded, "host_optim": 0.004 * offloaded,
                      "device_optim": 0.001 + 0.003 * res, "wait": 0.0}
            extra = {"layers": layers, "cards": 1, "resident_per_card": res,
                     "offloaded_layers": offloaded, "resident_layers": res, "seq_len": 64,
                     "accum": 2, "micro_batch": 1}
            lines.append(records.dumps(records.Step(
                label, i, 3.0 - i * 0.01, sum(phases.values()) * (1 + 0.01 * (i % 3)), 128,
                1e-3, phases, extra=extra, time=float(i))))
    return lines


def test_show_reports_the_step_models_own_numbers(store, rngdctl):
    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    Ingest(store).feed(run, passes())
    expected = stepmodel.for_run(store, run)
    code, out, _ = rngdctl("show", str(run), "--json")
    model = json.loads(out)["model"]
    assert code == 0
    assert model["error"] == expected.error
    assert model["iqr_s"] == list(expected.iqr)
    _, text, _ = rngdctl("show", str(run))
    assert f"error {stepmodel.format_verdict(expected.error, expected.interval)}" in text
    assert model["interval"] == expected.interval > 0


def test_show_of_a_run_without_a_baseline_has_no_model_line(store, rngdctl):
    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    Ingest(store).feed(run, [line for line in passes() if '"baseline"' not in line])
    _, text, _ = rngdctl("show", str(run))
    assert "step model" not in text
    assert "main: 12/12 steps" in text


def test_show_of_a_waiting_run_says_what_blocks_it_and_for_how_long(home, store, rngdctl):
    import time

    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    holder = {"name": "device_idle", "reading": 1, "threshold": "0 holders", "verdict": "fail",
              "detail": "pid 4121 python bench.py (kim) holds /dev/rngd/npu0pe0-3"}
    for minutes_ago in (14, 7, 0):
        store.add_gate_check(run, [holder], False, now=time.time() - 60 * minutes_ago)
    # A daemon that ticks keeps the verdict current (test_daemon_down.py: when none does).
    store.daemon_started(pid=os.getpid(), launcher="local", home=str(home.path))
    _, text, _ = rngdctl("show", str(run))
    assert ("blocked 14 m: device_idle: pid 4121 python bench.py (kim) holds "
            "/dev/rngd/npu0pe0-3") in text


def test_show_and_the_note_say_the_same_of_a_sealed_run_as_of_its_steps(store, rngdctl,
                                                                        tmp_path):
    from daemon.stepmodel import stats

    run = store.add_run({"cards": 1, "resident": 2, "steps": 40, "model": "tiny-llama"})
    Ingest(store).feed(run, passes(n=40))
    store.finish_run(run, "done", now=100.0)
    before = [rngdctl("show", str(run), "--json")[1], rngdctl("show", str(run))[1]]
    rngdctl("export", str(run), "--out", str(tmp_path / "read"))
    stats.seal(store, run)
    assert store.sealed_aggregates(run)  # the readers below take the sealed row
    after = [rngdctl("show", str(run), "--json")[1], rngdctl("show", str(run))[1]]
    rngdctl("export", str(run), "--out", str(tmp_path / "sealed"))
    assert json.loads(after[0])["passes"] == json.loads(before[0])["passes"]
    assert json.loads(after[0])["model"] == json.loads(before[0])["model"]
    assert after[1] == before[1]
    notes = [min((tmp_path / d).glob("*.md")).read_text() for d in ("read", "sealed")]
    assert notes[0] == notes[1]

