"""The optimizer's calibration: a fixed host part and a measured resident layer, not estimates."""

from __future__ import annotations

import json

import pytest
from synthetic_logs import KNOWN, expected_step_s, make_pass

from daemon import stepmodel
from daemon.stepmodel import Shape
from trainer.records import OPTIM_CALIBRATION

#: Known terms whose host optimizer has a fixed part per step (its call, the clip
#: norm, the first touch after the backward), as the cpu backend's has.
FIXED = {**KNOWN, "host_optim_fixed": 0.06, "host_optim_call": 0.01, "device_optim": 0.009}
#: What the trainer's calibration measures for them.
CALIBRATION = {"reps": 25, "host_per_layer_s": FIXED["host_optim"], "host_call_s": 0.01,
               "device_per_layer_s": FIXED["device_optim"], "device_call_s": 0.004,
               "device_reps": 25}
CALIBRATED = {OPTIM_CALIBRATION: CALIBRATION}


def test_a_calibrated_baseline_predicts_a_config_with_resident_layers_exactly():
    terms = stepmodel.fit(make_pass(FIXED, cards=2), CALIBRATED)
    main = make_pass(FIXED, cards=2, resident_per_card=8, label="main")

    c = stepmodel.compare(stepmodel.predict(terms, Shape.of_step(main[-1])), main)

    assert c.error == pytest.approx(0.0, abs=1e-12)
    # 16 of the 32 layers offloaded: the fixed part stays whole, the per-layer part halves.
    assert c.prediction.phases["host_optim"] == pytest.approx(0.06 + FIXED["host_optim"] * 16)
    assert c.prediction.phases["device_optim"] == pytest.approx(
        FIXED["device_optim_fixed"] + FIXED["device_optim"] * 16)
    assert c.prediction.estimated_terms == []


def test_with_every_layer_resident_the_host_optimizers_fixed_part_less_its_call_moves_to_the_cards():
    terms = stepmodel.fit(make_pass(FIXED, cards=2), CALIBRATED)
    main = make_pass(FIXED, cards=2, resident_per_card=16, label="main")

    p = stepmodel.predict(terms, Shape.of_step(main[-1]))

    assert p.phases["host_optim"] == 0.0
    assert p.phases["device_optim"] == pytest.approx(
        FIXED["device_optim_fixed"] + FIXED["device_optim"] * 32 + 0.06 - 0.01)
    assert stepmodel.compare(p, main).error == pytest.approx(0.0, abs=1e-12)


def test_the_fitted_terms_say_what_was_calibrated_and_what_the_baseline_measured():
    terms = stepmodel.fit(make_pass(FIXED), CALIBRATED)

    assert terms.host_optim_fixed.seconds == pytest.approx(0.06)
    assert terms.host_optim_fixed.source.startswith("baseline, median of steps 6-20, less 32 x")
    assert terms.host_optim.source.startswith("calibrated:")
    assert terms.device_optim.source.startswith("calibrated:") and not terms.device_optim.estimated
    assert terms.host_optim_call.seconds == pytest.approx(0.01)


def test_a_calibration_slower_than_the_baseline_itself_is_not_used():
    # 32 layers at the calibrated cost would take longer than the whole measured phase.
    slow = {OPTIM_CALIBRATION: {**CALIBRATION, "host_per_layer_s": 1.0}}

    terms = stepmodel.fit(make_pass(FIXED), slow)

    assert terms.host_optim_fixed.seconds == 0.0
    assert terms.host_optim.seconds == pytest.approx(0.06 / 32 + FIXED["host_optim"])


def test_interleaved_steps_keep_the_calibrated_cost_per_layer_and_take_the_fixed_part_from_each_step():
    terms = stepmodel.fit(make_pass(FIXED, cards=2), CALIBRATED)
    target = Shape.of_step(make_pass(FIXED, cards=2, resident_per_card=8, label="main")[-1])
    prediction = stepmodel.predict(terms, target)
    step = make_pass(FIXED, cards=2)[7]  # step 8: the spread's factor 1.00
    step["phases"]["host_optim"] += 0.02  # this step's host optimizer ran 20 ms slower

    got = stepmodel.predict_step(prediction, step)

    assert got["host_optim"] == pytest.approx(0.06 + 0.02 + FIXED["host_optim"] * 16)
    assert got["device_optim"] == pytest.approx(prediction.phases["device_optim"])


def test_rngdctl_model_prices_resident_layers_by_the_calibration_without_estimates(
        store, recorded_run, rngdctl):
    run = recorded_run(make_pass(FIXED, raw=False), baseline_config=CALIBRATED)

    code, out, err = rngdctl("model", "--baseline", str(run), "--cards", "2", "--resident", "2",
                             "--json")

    assert code == 0, err
    answer = json.loads(out)
    assert answer["step_s"] == pytest.approx(expected_step_s(FIXED, cards=2, resident_per_card=2))
    assert answer["estimated_terms"] == []
    names = [t["name"] for t in answer["terms"]]
    assert {"host_optim_fixed", "host_optim_call"} <= set(names)


def test_a_stored_run_with_a_calibrated_baseline_is_compared_with_zero_error(store, recorded_run):
    run = recorded_run(make_pass(FIXED, cards=2, raw=False),
                       make_pass(FIXED, cards=2, resident_per_card=8, label="main", raw=False),
                       baseline_config=CALIBRATED)

    c = stepmodel.for_run(store, run)

    assert c.error == pytest.approx(0.0, abs=1e-12)
    assert c.prediction.terms.host_optim_fixed.seconds == pytest.approx(0.06)


def test_the_same_run_without_its_calibration_is_priced_as_before_calibrations(store, recorded_run):
    run = recorded_run(make_pass(FIXED, cards=2, raw=False),
                       make_pass(FIXED, cards=2, resident_per_card=8, label="main", raw=False),
                       baseline_config=CALIBRATED)

    c = stepmodel.for_run(store, run, calibrated=False)

    # The whole host optimizer per layer: half the layers offloaded, half the fixed part
    # gone from the host; a resident layer priced like an offloaded one, fixed part included.
    per_layer = FIXED["host_optim"] + 0.06 / 32
    assert c.prediction.phases["host_optim"] == pytest.approx(per_layer * 16)
    assert c.prediction.estimated_terms == ["device_optim"]
    assert c.error > 0


#: On the cpu backend the cards are the host: one layer's AdamW costs the same on either.
ON_HOST = {**FIXED, "device_optim": FIXED["host_optim"]}
#: Card 0's timing caught a slow stretch of the host, half as long again as the host's.
SLOW_CARD = {OPTIM_CALIBRATION: {**CALIBRATION, "device_per_layer_s": ON_HOST["host_optim"] * 1.5}}


def test_where_the_cards_are_the_host_a_card_calibration_slowed_by_the_host_gives_way_to_the_hosts():
    main = make_pass(ON_HOST, cards=2, resident_per_card=16, label="main")

    on_cpu = stepmodel.fit(make_pass(ON_HOST, cards=2), {**SLOW_CARD, "backend": "cpu"})
    c = stepmodel.compare(stepmodel.predict(on_cpu, Shape.of_step(main[-1])), main)

    assert c.error == pytest.approx(0.0, abs=1e-12)
    assert on_cpu.device_optim.seconds == ON_HOST["host_optim"]
    assert "the cards are the host" in on_cpu.device_optim.source


@pytest.mark.parametrize("backend", ["cuda:0,cuda:1", None])
def test_a_card_of_its_own_keeps_its_own_calibration(backend):
    config = {**SLOW_CARD, "backend": backend}

    terms = stepmodel.fit(make_pass(ON_HOST, cards=2), config)

    assert terms.device_optim.seconds == pytest.approx(ON_HOST["host_optim"] * 1.5)
    assert terms.device_optim.source.startswith("calibrated: one more layer of card 0's")


def test_where_the_cards_are_the_host_a_card_calibration_below_the_hosts_is_kept():
    fast = {OPTIM_CALIBRATION: {**CALIBRATION, "device_per_layer_s": ON_HOST["host_optim"] * 0.9},
            "backend": "cpu"}

    terms = stepmodel.fit(make_pass(ON_HOST, cards=2), fast)

    assert terms.device_optim.seconds == pytest.approx(ON_HOST["host_optim"] * 0.9)
