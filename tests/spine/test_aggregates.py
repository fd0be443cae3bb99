"""A pass's numbers from the store's aggregates are the numbers of the full computation.

``stats.pass_stats`` reads order statistics off SQLite's indexes; the
reference decodes every step and takes its medians and means with
``statistics`` (``reference``, ``loss_table``), on random runs (seeded) with
ties, gaps, repeats, non-finite losses, missing and negative phases and
0-token steps.
"""

import dataclasses
import math
import random
import sqlite3
import statistics

import pytest

from daemon import stepmodel
from daemon import store as store_mod
from daemon.stepmodel import stats
from daemon.store import Store
from trainer import records

EPS = 2.0 ** -52


def random_steps(rng: random.Random, label: str, n: int) -> list[records.Step]:
    ties = rng.random() < 0.3  # few distinct step times: many equal values
    out = []
    step = 0
    for _ in range(n):
        step += 1 if rng.random() < 0.9 else rng.randint(2, 5)  # gaps
        step_s = rng.choice([0.01, 0.02, 0.03]) if ties else rng.lognormvariate(-3, 0.5)
        loss = rng.choice([math.nan, math.inf, -math.inf]) if rng.random() < 0.03 \
            else rng.uniform(0.5, 4.0)
        phases = {}
        for p in records.PHASES:
            r = rng.random()
            if r < 0.05:
                continue  # a phase missing from this step
            value = -rng.random() * 1e-4 if r < 0.08 else step_s * rng.random() / 4
            phases[p] = float(round(value * 1e4)) if rng.random() < 0.05 else value
        tokens = 0 if rng.random() < 0.02 else rng.choice([128, 120, 256])
        extra = {"layers": 4, "cards": 1, "resident_per_card": 0, "seq_len": 64, "accum": 2}
        out.append(records.Step(label, step, loss, step_s, tokens, 1e-3, phases, extra=extra,
                                time=float(step)))
    return out


def fill(store: Store, rng: random.Random, run_id: int, label: str, n: int, *,
         every_phase: bool = False) -> None:
    steps = random_steps(rng, label, n)
    if every_phase:  # as the trainer writes them: each phase the step model needs, 0.0 if idle
        steps = [dataclasses.replace(s, phases={p: 0.0 for p in stepmodel.NEEDED} | s.phases)
                 for s in steps]
    fed = steps + rng.sample(steps, k=min(len(steps), 7))  # some fed twice
    rng.shuffle(fed)
    while fed:  # in batches of random size, out of order
        k = rng.randint(1, 400)
        store.add_steps(run_id, fed[:k])
        fed = fed[k:]


def quartiles(values: list[float]) -> tuple[float, float] | None:
    """The first and third quartiles by ``statistics`` (inclusive), not the stats engine."""
    if len(values) < 2:
        return (values[0], values[0]) if values else None
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def reference(steps: list[dict]) -> dict:
    """The numbers as computed before the aggregates, from every decoded step: the medians
    and quartiles by ``statistics``, independent of the stats package's order engine."""
    chosen = stats.steady(steps)
    median_s = statistics.median(s["step_s"] for s in chosen) if chosen else None
    median_tokens = statistics.median(s["tokens"] for s in chosen) if chosen else None
    slowest = max(chosen, key=lambda s: s["step_s"]) if chosen else None
    early = [s["step_s"] for s in chosen if s["step"] <= 25]
    return {
        "steps": len(steps), "steady": len(chosen),
        "first_step": chosen[0]["step"] if chosen else None,
        "last_step": chosen[-1]["step"] if chosen else None,
        "median_step_s": median_s,
        "iqr_step_s": quartiles([s["step_s"] for s in chosen]),
        "fwd_bwd_iqr": quartiles([float((s.get("phases") or {}).get("fwd_bwd", 0.0))
                                  for s in chosen]),
        "tokens_per_s": median_tokens / median_s if median_s else None,
        "first_loss": steps[0]["loss"] if steps else None,
        "last_loss": steps[-1]["loss"] if steps else None,
        "nonfinite_losses": sum(s["loss"] is None or not math.isfinite(s["loss"])
                                for s in steps),
        "slowest": (slowest["step_s"], slowest["step"]) if slowest else (None, None),
        "early_median_s": statistics.median(early) if early else None,
        "phase_medians": {p: statistics.median(float((s.get("phases") or {}).get(p, 0.0))
                                               for s in chosen) for p in records.PHASES}
        if chosen else {},
        "phase_counts": {p: sum(1 for s in chosen if p in (s.get("phases") or {}))
                         for p in records.PHASES},
        "tokens_or_64": statistics.median(float(s["tokens"] or 64) for s in chosen)
        if chosen else None,
    }


def of_aggregates(p: stats.PassStats) -> dict:
    return {
        "steps": p.steps, "steady": p.steady, "first_step": p.first_step,
        "last_step": p.last_step, "median_step_s": p.median_step_s,
        "iqr_step_s": p.iqr_step_s, "fwd_bwd_iqr": p.fwd_bwd_iqr, "tokens_per_s": p.tokens_per_s,
        "first_loss": p.first_loss, "last_loss": p.last_loss,
        "nonfinite_losses": p.nonfinite_losses, "slowest": (p.slowest_s, p.slowest_step),
        "early_median_s": p.early_median_s,
        "phase_medians": p.phase_medians if p.steady else {},
        "phase_counts": p.phase_counts,
        "tokens_or_64": p.median_tokens_or(64) if p.steady else None,
    }


def same(a, b) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("seed", range(24))
def test_the_aggregates_give_the_full_computations_numbers_on_random_runs(store, seed):
    rng = random.Random(seed)
    n = rng.choice([1, 3, 5, 6, 7, 12, 25, 26, 90, 400, 2500])
    other = store.add_run({"cards": 1})
    run = store.add_run({"cards": 1})
    fill(store, rng, other, records.MAIN, 50)  # another run's steps are not counted
    fill(store, rng, run, records.MAIN, n)
    fill(store, rng, run, records.BASELINE, rng.choice([3, 40]))
    for label in (records.MAIN, records.BASELINE):
        steps = store.steps(run, label)
        got = of_aggregates(stats.pass_stats(store, run, label))
        want = reference(steps)
        assert same(got, want), {k: (got[k], want[k]) for k in got if not same(got[k], want[k])}
        assert same(stats.steady_medians(store, run, label),
                    (want["median_step_s"], want["tokens_per_s"]))


def loss_table(steps: list[dict], total: int) -> list[stats.LossRow]:
    """The note's loss table from every decoded step, by ``statistics``: the reference."""
    rows = []
    for first, last in stats.loss_ranges(total):
        chosen = [s for s in steps if first <= s["step"] <= last]
        finite = [s["loss"] for s in chosen if s["loss"] is not None and math.isfinite(s["loss"])]
        rows.append(stats.LossRow(
            first, last, len(chosen), statistics.fmean(finite) if finite else None,
            statistics.median(s["step_s"] for s in chosen) if chosen else None,
            len(chosen) - len(finite)))
    return rows


@pytest.mark.parametrize("seed", range(8))
def test_the_loss_table_from_the_aggregates_matches_the_full_one(store, seed):
    rng = random.Random(100 + seed)
    run = store.add_run({"cards": 1})
    fill(store, rng, run, records.MAIN, rng.choice([30, 700, 3000]))
    steps = store.steps(run)
    want = loss_table(steps, steps[-1]["step"])
    got = stats.loss_table_of(store, run, records.MAIN, steps[-1]["step"])
    assert [(r.first, r.last, r.steps, r.median_step_s, r.nonfinite) for r in got] == \
        [(r.first, r.last, r.steps, r.median_step_s, r.nonfinite) for r in want]
    for g, w in zip(got, want):
        if w.mean_loss is None:
            assert g.mean_loss is None
            continue
        # SQLite sums in order; fmean sums exactly: they differ by the order's rounding.
        assert g.mean_loss == pytest.approx(w.mean_loss, rel=w.steps * EPS, abs=0)


def test_the_step_model_from_the_store_is_the_model_from_the_decoded_steps(store):
    rng = random.Random(7)
    run = store.add_run({"cards": 1})
    # Every steady step needs every phase for a fit: give them all, as the trainer does.
    fill(store, rng, run, records.BASELINE, 300, every_phase=True)
    fill(store, rng, run, records.MAIN, 900, every_phase=True)
    baseline, main = store.steps(run, records.BASELINE), store.steps(run, records.MAIN)
    want = stepmodel.compare(stepmodel.predict(stepmodel.fit(baseline,
                                                             baseline_label=f"run {run} baseline"),
                                               stepmodel.Shape.of_step(main[-1])), main)
    got = stepmodel.for_run(store, run)
    assert got.as_dict() == want.as_dict()


def test_a_store_from_before_the_aggregates_is_backfilled_from_its_json(tmp_path):
    path = tmp_path / "v6.db"
    conn = sqlite3.connect(path)
    for version in (1, 2, 3, 4, 5, 6):
        for statement in store_mod.MIGRATIONS[version]:
            conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '6')")
    conn.execute("INSERT INTO runs (status, config, position, created) "
                 "VALUES ('done', '{\"cards\": 1}', 1, 0)")
    rng = random.Random(3)
    steps = random_steps(rng, records.MAIN, 200)
    conn.executemany(
        "INSERT INTO steps (run_id, config_label, step, loss, loss_flag, step_s, tokens, lr,"
        " phases, memory, extra, time) VALUES (1,?,?,?,?,?,?,?,?,?,?,?)",
        [(s.config_label, s.step, store_mod._finite_or_none(s.loss), store_mod._loss_flag(s.loss),
          s.step_s, s.tokens, s.lr, store_mod._json(s.phases), "{}", store_mod._json(s.extra),
          s.time) for s in steps])
    conn.commit()
    conn.close()
    with Store(path) as s:
        assert s.schema_version() == store_mod.SCHEMA_VERSION
        assert s.step_counts(1) == {records.MAIN: 200}
        got = of_aggregates(stats.pass_stats(s, 1, records.MAIN))
        want = reference(s.steps(1, records.MAIN))
        assert same(got, want)


# === Sealed: a finished run's numbers, stored once ===========================


def numbers(p: stats.PassStats) -> dict:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.compare}


def statements_reading(store: Store):
    """The SQL the store runs from now on (sqlite3's own trace hook on the connection)."""
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    return seen


@pytest.mark.parametrize("seed", range(12))
def test_a_sealed_runs_numbers_are_the_full_computations(store, seed):
    rng = random.Random(200 + seed)
    run = store.add_run({"cards": 1})
    fill(store, rng, run, records.MAIN, rng.choice([6, 7, 90, 400, 2500]))
    fill(store, rng, run, records.BASELINE, rng.choice([3, 40]))
    stats.seal(store, run)
    for label in (records.MAIN, records.BASELINE):
        steps = store.steps(run, label)
        got, want = of_aggregates(stats.pass_stats(store, run, label)), reference(steps)
        assert same(got, want), {k: (got[k], want[k]) for k in got if not same(got[k], want[k])}
        assert same(numbers(stats.pass_stats(store, run, label)),
                    numbers(stats.live_pass_stats(store, run, label)))
        assert same(stats.steady_medians(store, run, label),
                    (want["median_step_s"], want["tokens_per_s"]))
    last = store.steps(run)[-1]["step"]
    assert stats.loss_table_of(store, run, records.MAIN, last) == \
        stats.live_loss_table(store, run, records.MAIN, last)
    assert stats.step_seconds(store, run) == store.stepped_seconds(run)


def test_reading_a_sealed_run_walks_no_index_of_its_steps(store):
    rng = random.Random(5)
    run = store.add_run({"cards": 1})
    fill(store, rng, run, records.MAIN, 3000)
    last = store.steps(run)[-1]["step"]
    stats.seal(store, run)
    seen = statements_reading(store)
    stats.pass_stats(store, run, records.MAIN)
    stats.loss_table_of(store, run, records.MAIN, last)
    stats.steady_medians(store, run, records.MAIN)
    walks = [s for s in seen if "OFFSET" in s or "SUM(loss)" in s]
    assert not walks and seen, seen


def test_a_step_stored_after_sealing_is_counted(store):
    rng = random.Random(6)
    run = store.add_run({"cards": 1})
    fill(store, rng, run, records.MAIN, 400)
    stats.seal(store, run)
    store.add_steps(run, [records.Step(records.MAIN, 10_000, 1.0, 99.0, 128, 1e-3,
                                       {p: 1.0 for p in records.PHASES}, time=1.0)])
    got = stats.pass_stats(store, run, records.MAIN)
    assert (got.steps, got.slowest_s, got.slowest_step) == (401, 99.0, 10_000)
    assert same(numbers(got), numbers(stats.live_pass_stats(store, run, records.MAIN)))


def test_a_row_sealed_by_an_older_rngdctl_is_computed_again_not_misread(store):
    rng = random.Random(8)
    run = store.add_run({"cards": 1})
    fill(store, rng, run, records.MAIN, 300)
    stats.seal(store, run)
    old = dict(store.sealed_aggregates(run))
    old["pass:main"] = {k: v for k, v in old["pass:main"].items() if k != "early_median_s"}
    for name, rows in old.items():
        if name.startswith("loss_table:"):
            old[name] = [{**row, "retired_field": 1} for row in rows]
    store.seal_aggregates(run, old, steps=store.run_step_total(run))
    want = reference(store.steps(run))
    assert same(of_aggregates(stats.pass_stats(store, run, records.MAIN)), want)
    last = store.steps(run)[-1]["step"]
    assert stats.loss_table_of(store, run, records.MAIN, last) == \
        stats.live_loss_table(store, run, records.MAIN, last)


# === Running: a pass's numbers while its steps arrive ========================


@pytest.mark.parametrize("seed", range(12))
def test_a_running_runs_numbers_are_the_full_computations_after_every_batch(store, seed):
    rng = random.Random(300 + seed)
    run = store.add_run({"cards": 1})
    steps = random_steps(rng, records.MAIN, rng.choice([40, 400, 1500]))
    fed = steps + rng.sample(steps, k=min(len(steps), 7))  # some fed twice
    if seed % 2:
        rng.shuffle(fed)  # out of order: markers move both ways
    while fed:  # read between batches of random size, as show or the TUI reads a running run
        k = rng.randint(1, 300)
        store.add_steps(run, fed[:k])
        fed = fed[k:]
        stored = store.steps(run)
        got, want = of_aggregates(stats.pass_stats(store, run, records.MAIN)), reference(stored)
        assert same(got, want), {k: (got[k], want[k]) for k in got if not same(got[k], want[k])}
        assert same(stats.steady_medians(store, run, records.MAIN),
                    (want["median_step_s"], want["tokens_per_s"]))


def sqlite_work(store: Store, read) -> int:
    """SQLite's virtual-machine instructions (in thousands) that ``read()`` costs."""
    count = [0]

    def tick():
        count[0] += 1
        return 0

    store.conn.set_progress_handler(tick, 1000)
    try:
        read()
    finally:
        store.conn.set_progress_handler(None, 0)
    return count[0]


def ingested(store: Store, steps: list[records.Step]) -> int:
    """A new run with ``steps`` ingested in batches of 500, as a running run is."""
    run = store.add_run({"cards": 1})
    for i in range(0, len(steps), 500):
        store.add_steps(run, steps[i:i + 500])
    return run


def test_a_running_pass_costs_sqlite_the_same_work_at_any_length(store):
    rng = random.Random(11)
    costs = {}
    for n in (2_000, 40_000):
        steps = [dataclasses.replace(s, loss=1.0) for s in random_steps(rng, records.MAIN, n)]
        run = ingested(store, steps)  # never sealed
        costs[n] = sqlite_work(store, lambda r=run: (stats.pass_stats(store, r, records.MAIN),
                                                     stats.steady_medians(store, r, records.MAIN)))
    # The order statistics walked from the start: half the pass per median, 20x the work.
    assert costs[40_000] <= 2 * costs[2_000] + 5, costs


def test_a_batch_of_steps_costs_sqlite_the_same_work_at_any_length_of_its_pass(store):
    rng = random.Random(12)
    costs = {}
    for n in (2_000, 40_000):
        steps = random_steps(rng, records.MAIN, n + 500)
        run = ingested(store, steps[:n])
        costs[n] = sqlite_work(store, lambda r=run, new=steps[n:]: store.add_steps(r, new))
    # The markers' count of the new rows found them through the pass's step index: a
    # walk of every steady step of the pass each batch, 20x the work at 40,000.
    assert costs[40_000] <= 2 * costs[2_000] + 5, costs


def test_a_store_from_before_the_markers_is_read_right_and_marked_at_its_next_steps(tmp_path):
    path = tmp_path / "v10.db"
    with Store(path) as s:
        run = s.add_run({"cards": 1})
        s.add_steps(run, random_steps(random.Random(4), records.MAIN, 300))
    conn = sqlite3.connect(path)  # as version 10 left it: no absent counts, no markers
    conn.executescript("DROP TABLE steady_absent; DROP TABLE order_markers; DROP TABLE pass_state;"
                       " DROP TABLE evals; DROP TABLE card_samples;"  # versions 12 and 13
                       " DROP TABLE tracker_passes; DROP TABLE tracker_runs;"  # version 15
                       " DROP TABLE trackers;"
                       " UPDATE meta SET value = '10' WHERE key = 'schema_version';")
    conn.close()
    with Store(path) as s:
        assert s.schema_version() == store_mod.SCHEMA_VERSION
        assert same(of_aggregates(stats.pass_stats(s, run, records.MAIN)),
                    reference(s.steps(run, records.MAIN)))
        more = random_steps(random.Random(5), records.MAIN, 400)[300:]
        s.add_steps(run, more)
        assert s.conn.execute("SELECT COUNT(*) FROM order_markers").fetchone()[0]
        assert same(of_aggregates(stats.pass_stats(s, run, records.MAIN)),
                    reference(s.steps(run, records.MAIN)))
