"""`rngdctl plan` and `submit --cards best`: every config the node allows, priced by the model."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from synthetic_logs import KNOWN, expected_step_s, make_pass

from daemon import stepmodel
from daemon.errors import BadInput
from daemon.probes.host_reading import Holder, HostReading
from daemon.scheduling import plan
from daemon.scheduling.baselines import find_baseline
from daemon.scheduling.plan import Capacity
from rngdctl.cli import cli
from rngdctl.units import secs as plan_secs

LAYER = 218_112_000  # the synthetic logs' parameters per layer (Llama-3.1-8B's)


def invoke(home, *args):
    result = CliRunner().invoke(cli, ["--home", str(home.path), *args])
    return result


@pytest.fixture
def small_baseline(store):
    """A 4-layer all-offload baseline of tiny-llama on cpu (synthetic terms, tiny-llama's sizes)."""
    from daemon.run.ingest import Ingest
    from trainer import records

    def add(seq_len: int = 512, accum: int = 4):
        steps = make_pass(layers=4, raw=False, seq_len=seq_len, accum=accum)
        steps[-1].extra["params_per_layer"] = 46_208  # one dict shared by every step
        run_id = store.add_run({"model": "tiny-llama", "backend": "cpu", "cards": 1})
        start = records.Start(config_label="baseline", time=900.0, config={
            "backend": "cpu", "cards": 1, "layers": 4, "resident_layers": 0, "seq_len": seq_len,
            "accum": accum, "micro_batch": 1, "vocab_size": 512, "hidden_size": 64,
            "tied_head": False, "params_per_layer": 46_208})
        Ingest(store).feed(run_id, [records.dumps(start), *map(records.dumps, steps)])
        return run_id
    return add


def test_every_cards_and_resident_config_the_node_allows_is_priced_by_the_step_model(
        store, recorded_run):
    run = recorded_run(make_pass(raw=False))
    result = plan.make_plan(store, run, Capacity(2, 2, None, "two cards"), steps=100)

    assert [(r.cards, r.resident) for r in result.rows] == (
        [(1, r) for r in range(33)] + [(2, r) for r in range(17)])
    row = next(r for r in result.rows if (r.cards, r.resident) == (2, 8))
    answer = stepmodel.model_config(store, run, cards=2, resident=8)
    assert row.step_s == answer.prediction.step_s
    # Without a resident pass the model estimates a resident layer's optimizer step as h.
    assert row.step_s == pytest.approx(expected_step_s(
        {**KNOWN, "device_optim": KNOWN["host_optim"]}, cards=2, resident_per_card=8))
    assert row.tokens_per_s == answer.prediction.tokens_per_s
    assert row.total_s == pytest.approx(100 * row.step_s)


def test_the_fastest_config_that_fits_the_cards_free_now_is_marked(store, recorded_run):
    run = recorded_run(make_pass(raw=False))
    # Each card holds 40 GB: 2 cards x 16 resident (the fastest of all) does not fit.
    result = plan.make_plan(store, run, Capacity(4, 2, None, "4 cards, 2 free"), steps=10,
                            card_gb=40.0)

    candidates = [r for r in result.rows if r.fits and r.cards <= 2]
    assert result.best == min(candidates, key=lambda r: r.step_s)
    assert result.best.free_now and result.best.card_fits
    fastest = min(result.rows, key=lambda r: r.step_s)
    assert not fastest.card_fits or fastest.cards > 2
    assert result.best != fastest
    assert "2 cards free now" in result.why


def test_a_host_too_small_for_any_config_leaves_nothing_to_recommend(store, recorded_run):
    run = recorded_run(make_pass(raw=False))
    # cpu baseline: the host plays the cards, so every config needs the whole model's
    # training state in host memory; 1 GB holds none of them.
    result = plan.make_plan(store, run, Capacity(1, 1, 1.0, "one card"), steps=10)

    assert result.rows and not any(r.host_fits for r in result.rows)
    assert result.best is None
    assert result.why == "no config fits in card and host memory"


def test_busy_cards_are_priced_but_not_chosen(store, recorded_run):
    run = recorded_run(make_pass(raw=False))
    result = plan.make_plan(store, run, Capacity(2, 0, None, "both held"), steps=10)

    assert len(result.rows) == 33 + 17
    assert not any(r.free_now for r in result.rows)
    assert result.best is None and result.why == "no card is free now"


def _host(devices, holders=()):
    return HostReading(time=0.0, load=(0.1, 0.1, 0.1), holders=tuple(holders), complete=True,
                       devices=tuple(devices))


def test_the_local_launcher_counts_the_hosts_rngd_cards_and_the_ones_nobody_holds():
    devices = [f"/dev/rngd/npu{c}{part}" for c in range(3) for part in ("pe0-3", "mgmt")]
    bench = Holder(4121, "kim", "python bench.py", ("/dev/rngd/npu1pe0-3",))

    capacity = plan.local_capacity(_host(devices, [bench]), backend="furiosa:auto", host_gb=64.0)

    assert (capacity.cards, capacity.free) == (3, 2)
    assert "held: npu1" in capacity.rule


def test_on_a_cpu_backend_the_host_plays_every_card_up_to_one_per_layer():
    capacity = plan.local_capacity(_host([]), backend="cpu", host_gb=None)

    assert capacity.allowed(4) == 4 and capacity.free_of(4) == 4
    assert "host plays every card" in capacity.rule


def test_the_newest_run_of_the_model_with_an_all_offload_pass_is_the_baseline(
        store, recorded_run):
    older = recorded_run(make_pass(raw=False), config={"model": "tiny-llama", "cards": 1})
    newer = recorded_run(make_pass(raw=False), config={"model": "tiny-llama", "cards": 1})
    recorded_run(make_pass(cards=1, resident_per_card=2, label="main", raw=False),
                 config={"model": "tiny-llama", "cards": 1})  # resident only: no baseline
    recorded_run(make_pass(raw=False), config={"model": "tiny-qwen2", "cards": 1})

    assert find_baseline(store, "tiny-llama") == newer != older
    with pytest.raises(BadInput, match="no baseline for model 'llama-3.1-8b-mini'"):
        find_baseline(store, "llama-3.1-8b-mini")


def test_plan_prints_the_table_with_the_chosen_row_marked(home, small_baseline):
    run = small_baseline()
    result = invoke(home, "plan", "--baseline", str(run), "--steps", "50")

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"plan for tiny-llama: baseline run {run} baseline")
    marked = [line for line in lines if line.startswith("* ")]
    assert len(marked) == 2  # the row and the line saying why
    assert "host plays every card" in lines[1]


def test_plan_json_gives_the_same_rows_and_choice(home, small_baseline):
    run = small_baseline()
    result = invoke(home, "plan", "--model", "tiny-llama", "--json")

    data = json.loads(result.output)
    assert data["baseline_run"] == run and data["steps"] == 200
    # 4 layers: 1 card x 0-4, 2 x 0-2, 3 x 0-1, 4 x 0-1 resident.
    assert [(r["cards"], r["resident"]) for r in data["rows"]] == [
        (1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1),
        (4, 0), (4, 1)]
    best = min((r for r in data["rows"] if r["fits"] and r["free_now"]),
               key=lambda r: r["step_s"])
    assert data["best"] == {"cards": best["cards"], "resident": best["resident"]}


def test_plan_without_a_baseline_or_model_is_one_line_and_exit_2(rngdctl):
    code, out, err = rngdctl("plan")
    assert (code, out, err) == (2, "", "Error: give --baseline RUN or --model NAME\n")


def test_submit_cards_best_queues_the_plans_choice_and_says_which(home, store, small_baseline):
    run = small_baseline()
    expected = plan.make_plan(store, run, plan.local_capacity(_host([]), backend="cpu",
                                                              host_gb=plan.host_memory_gb()),
                              steps=200, seq_len=512, accum=4).best
    result = CliRunner().invoke(cli, ["--home", str(home.path), "submit", "--cards", "best"])

    assert result.exit_code == 0, result.output
    run_id = int(result.stdout.strip())
    config = store.run(run_id)["config"]
    assert (config["cards"], config["resident"]) == (expected.cards, expected.resident)
    assert result.stderr.startswith(
        f"chose {expected.cards} card{'s' if expected.cards != 1 else ''} x "
        f"{expected.resident} resident")
    assert f"predicted from run {run}" in result.stderr


def test_submit_cards_best_with_resident_is_refused_in_one_line(rngdctl, small_baseline, store):
    small_baseline()
    code, out, err = rngdctl("submit", "--cards", "best", "--resident", "2")
    assert (code, out) == (2, "")
    assert err == "Error: --cards best chooses --resident too: leave --resident out\n"
    assert len(store.runs()) == 1  # only the baseline: nothing was queued


def test_submit_cards_best_without_a_baseline_in_the_store_is_refused(rngdctl):
    code, out, err = rngdctl("submit", "--cards", "best")
    assert (code, out) == (2, "")
    assert err.startswith("Error: no baseline for model 'tiny-llama'") and err.count("\n") == 1


def test_plan_and_submit_cards_best_price_submits_config_and_say_it_is_extrapolated(
        home, store, small_baseline):
    # The demo's baseline: seq 64, accum 2 (128 tokens a step). Both commands price what a
    # submit of --steps 500 runs, seq 512 and accum 4, and say how far that reaches.
    run = small_baseline(seq_len=64, accum=2)
    priced = ("priced at seq 512, accum 4 (2,048 tokens a step): extrapolated 16x from the "
              "baseline's 128 tokens a step (seq 64, accum 2)")

    shown = invoke(home, "plan", "--model", "tiny-llama", "--steps", "500")
    data = json.loads(invoke(home, "plan", "--model", "tiny-llama", "--steps", "500",
                             "--json").output)
    chosen = CliRunner().invoke(cli, ["--home", str(home.path), "submit", "--cards", "best",
                                      "--steps", "500"])

    assert shown.exit_code == chosen.exit_code == 0, shown.output + chosen.output
    assert f"\n{priced[0].upper()}{priced[1:]}, as if" in shown.output
    assert f"predicted from run {run}, {priced}, as if" in chosen.stderr
    assert data["priced"]["extrapolation"] == 16
    best = next(r for r in data["rows"] if (r["cards"], r["resident"]) == (
        data["best"]["cards"], data["best"]["resident"]))
    config = store.run(int(chosen.stdout))["config"]
    assert (config["cards"], config["resident"], config["seq_len"], config["accum"]) == (
        best["cards"], best["resident"], 512, 4)
    assert f"({plan_secs(best['step_s'])} a step predicted" in chosen.stderr


def test_a_plan_at_the_baselines_own_tokens_says_it_is_not_extrapolated(home, small_baseline):
    small_baseline()
    shown = invoke(home, "plan", "--model", "tiny-llama")
    assert ("Priced at seq 512, accum 4 (2,048 tokens a step, as the baseline ran: not "
            "extrapolated in tokens)") in shown.output


def test_no_baseline_names_the_fix_each_command_has(rngdctl):
    code, _, err = rngdctl("submit", "--cards", "best")
    assert code == 2 and "--baseline RUN" not in err
    assert err.endswith("; queue one: rngdctl submit --model tiny-llama --cards 1 --baseline\n")
    code, _, err = rngdctl("plan", "--model", "tiny-llama")
    assert code == 2 and err.endswith(", or price from any run's with --baseline RUN\n")
