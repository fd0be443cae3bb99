"""`rngdctl diff A B`: only the config values that differ, then step time, tok/s and loss."""

from __future__ import annotations

import json

import pytest

from daemon.run.diff import diff_runs
from daemon.run.ingest import Ingest
from daemon.run.spec import validate
from trainer import records


@pytest.fixture
def run_with_steps(store):
    """A run of ``n`` main steps: step time ``step_s``, loss 5 - step * ``slope``, 256 tokens."""
    def add(n: int, *, step_s: float, slope: float, **options) -> int:
        config = validate({"cards": 1, "resident": 0, "steps": n, **options})
        run = store.add_run(config, name=config.get("name"))
        store.add_steps(run, [records.Step(
            config_label="main", step=k, loss=5.0 - k * slope, step_s=step_s, tokens=256,
            lr=1e-5, phases={}, time=float(k)) for k in range(1, n + 1)])
        store.finish_run(run, "done")
        return run
    return add


def test_only_the_config_values_that_differ_are_listed(store, run_with_steps):
    a = run_with_steps(60, step_s=0.010, slope=0.01, lr=1e-5)
    b = run_with_steps(60, step_s=0.008, slope=0.02, lr=2e-5, resident=2)

    d = diff_runs(store, a, b)

    assert d.config == {"lr": (1e-5, 2e-5), "resident": (0, 2)}


def test_step_time_tok_s_and_loss_deltas_are_b_minus_a(store, run_with_steps):
    a = run_with_steps(60, step_s=0.010, slope=0.01)
    b = run_with_steps(40, step_s=0.008, slope=0.02)

    d = diff_runs(store, a, b)

    assert d.step_s_delta == pytest.approx((-0.002, -0.2))
    assert d.tokens_per_s_delta == pytest.approx((256 / 0.008 - 256 / 0.010, 0.25))
    # Step 40 is the last both reached: 5 - 0.8 against 5 - 0.4.
    assert d.common_step == 40
    assert d.loss_at_common == pytest.approx((4.6, 4.2))
    assert d.loss_delta == pytest.approx(-0.4)


def test_the_loss_tables_share_their_ranges_side_by_side(store, run_with_steps):
    a = run_with_steps(60, step_s=0.01, slope=0.01)
    b = run_with_steps(40, step_s=0.01, slope=0.02)

    rows = diff_runs(store, a, b).loss_rows

    assert [(r.first, r.last) for r in rows] == [(1, 25), (26, 50), (51, 60)]
    # Steps 1-25: mean of 5 - 0.01 k is 5 - 0.13; of 5 - 0.02 k, 5 - 0.26.
    assert (rows[0].a, rows[0].b) == (pytest.approx(4.87), pytest.approx(4.74))
    assert rows[0].delta == pytest.approx(-0.13)
    assert rows[2].b is None and rows[2].delta is None  # B stopped at 40
    assert (rows[1].a_steps, rows[1].b_steps) == (25, 15)


def test_diff_prints_the_changes_and_json_gives_the_same(cli, run_with_steps):
    a = run_with_steps(30, step_s=0.010, slope=0.01, name="r1")
    b = run_with_steps(30, step_s=0.012, slope=0.01, name="r2", seed=3)

    text = cli("diff", "r1", "r2").output
    data = json.loads(cli("diff", str(a), str(b), "--json").output)

    assert text.splitlines()[0].startswith(f"run {a} (r1) -> run {b} (r2)")
    assert "  name  r1 -> r2" in text and "  seed  0 -> 3" in text
    assert "lr" not in text.split("step time")[0]
    assert "+2.00 ms (+20.0%)" in text
    assert "different steps" not in text  # both ran 30 steps
    assert data["config"] == {"name": {"a": "r1", "b": "r2"}, "seed": {"a": 0, "b": 3}}
    assert data["step_s_delta"]["relative"] == pytest.approx(0.2)


def test_diff_of_an_unknown_run_is_one_line_and_exit_2(rngdctl, run_with_steps):
    a = run_with_steps(10, step_s=0.01, slope=0.01)
    code, out, err = rngdctl("diff", str(a), "99")
    assert (code, out, err) == (2, "", "Error: no run '99'\n")


# === the held-out loss (issue 26) ============================================


def held_out(store, run: int, losses: dict[int, float]) -> None:
    Ingest(store).feed(run, [records.dumps(records.Eval("main", step, loss, 4096, 64, 0.5))
                             for step, loss in losses.items()])


def test_the_held_out_loss_is_compared_at_the_last_step_both_runs_evaluated(store,
                                                                            run_with_steps):
    a = run_with_steps(60, step_s=0.01, slope=0.01)
    b = run_with_steps(40, step_s=0.01, slope=0.02)
    held_out(store, a, {0: 5.0, 20: 4.9, 40: 4.8, 60: 4.75})
    held_out(store, b, {0: 5.0, 20: 4.7, 40: 4.5})

    d = diff_runs(store, a, b)

    assert (d.held_out_step, d.held_out_at) == (40, (4.8, 4.5))
    assert d.held_out_delta == pytest.approx(-0.3)
    # Each range's newest held-out loss, beside the train loss's mean.
    assert [(r.a_held_out, r.b_held_out) for r in d.loss_rows] == [
        (4.9, 4.7), (4.8, 4.5), (4.75, None)]


def test_diff_prints_the_held_out_loss_beside_the_train_loss(store, run_with_steps, rngdctl):
    a = run_with_steps(60, step_s=0.01, slope=0.01)
    b = run_with_steps(60, step_s=0.01, slope=0.02)
    held_out(store, a, {20: 4.9, 60: 4.75})
    held_out(store, b, {20: 4.7, 60: 4.25})

    code, out, _ = rngdctl("diff", str(a), str(b))

    assert code == 0
    assert "held-out loss at step 60 (the last both evaluated)  4.7500 -> 4.2500   -0.5000" in out
    assert f"held-out {a}    held-out {b}     delta" in out
    assert "  51-60" in out and out.split("  51-60")[1].split()[3:6] == ["4.7500", "4.2500",
                                                                        "-0.5000"]
