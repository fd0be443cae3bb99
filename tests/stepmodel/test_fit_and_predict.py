"""Synthetic logs made from known terms: fitting recovers the terms, predictions are exact."""

from __future__ import annotations

import pytest
from synthetic_logs import KNOWN, make_pass

from daemon import stepmodel
from daemon.errors import BadInput, ModelFitError
from daemon.stepmodel import Shape, Term, Terms


def known_terms(**baseline) -> Terms:
    shape = Shape(**{"layers": 32, "seq_len": 512, "accum": 4, **baseline})
    t = {k: Term(k, v, "per", "known") for k, v in KNOWN.items()}
    return Terms(baseline=shape, compute=t["compute"], upload=t["upload"],
                 download=t["download"], host_optim=t["host_optim"],
                 device_optim_fixed=t["device_optim_fixed"], device_optim=t["device_optim"],
                 wait=t["wait"], unclaimed=t["unclaimed"], baseline_median_s=0.0,
                 baseline_tokens=float(shape.tokens), baseline_iqr=(0.0, 0.0))


def test_fitting_a_synthetic_baseline_recovers_every_term():
    terms = stepmodel.fit(make_pass(), resident_steps=make_pass(cards=2, resident_per_card=8))

    fitted = {t.name: t.seconds for t in terms.all()}
    # No optimizer calibration in these records: the host optimizer has no fixed part.
    assert fitted == pytest.approx({"fwd_bwd": KNOWN["compute"], **{
        k: v for k, v in KNOWN.items() if k != "compute"},
        "host_optim_fixed": 0.0, "host_optim_call": 0.0}, rel=1e-9)


def test_the_fit_uses_steps_6_to_n_and_ignores_the_warm_up():
    terms = stepmodel.fit(make_pass(steps=15))

    assert terms.compute.seconds == pytest.approx(KNOWN["compute"])
    assert terms.compute.source == "baseline, median of steps 6-15"


def test_predictions_from_known_terms_are_exact():
    terms = known_terms()
    target = Shape(layers=32, cards=2, resident_per_card=8, seq_len=1024, accum=2)

    p = stepmodel.predict(terms, target)

    # 16 resident, 16 offloaded; 2048 tokens as in the baseline.
    assert p.phases == pytest.approx({
        "fwd_bwd": 0.80, "upload": 0.007 * 16, "download": 0.006 * 16, "host_optim": 0.19 * 16,
        "device_optim": 0.05 + 0.012 * 16, "wait": 0.003, "unclaimed": 0.010})
    assert p.step_s == pytest.approx(0.80 + 0.013 * 16 + 0.19 * 16 + 0.05 + 0.192 + 0.013)


def test_compute_scales_with_tokens_and_layers():
    terms = known_terms()

    p = stepmodel.predict(terms, Shape(layers=16, seq_len=256, accum=4))

    assert p.phases["fwd_bwd"] == pytest.approx(0.80 * 0.5 * 0.5)


def test_predicting_the_baselines_own_config_gives_its_measured_median():
    baseline = make_pass()
    terms = stepmodel.fit(baseline)

    p = stepmodel.predict(terms, terms.baseline)

    assert p.step_s == pytest.approx(terms.baseline_median_s)
    assert stepmodel.compare(p, baseline).error == pytest.approx(0.0, abs=1e-12)


def test_a_config_made_from_the_same_terms_is_predicted_with_zero_error():
    main = make_pass(cards=2, resident_per_card=4, label="main")
    terms = stepmodel.fit(make_pass(cards=2), resident_steps=main)

    c = stepmodel.compare(stepmodel.predict(terms, Shape.of_step(main[-1])), main)

    assert c.error == pytest.approx(0.0, abs=1e-12)
    assert c.measured_s == pytest.approx(c.model_s)


def test_without_a_resident_pass_the_device_optimizer_term_is_an_estimate_and_says_so():
    terms = stepmodel.fit(make_pass())

    assert terms.device_optim.estimated
    assert terms.device_optim.seconds == terms.host_optim.seconds
    assert stepmodel.predict(terms, Shape(layers=32, resident_per_card=4, seq_len=512,
                                          accum=4)).estimated_terms == ["device_optim"]
    assert stepmodel.predict(terms, terms.baseline).estimated_terms == []


def test_a_baseline_without_upload_timings_gives_one_clear_message():
    baseline = make_pass()
    for step in baseline:
        del step["phases"]["upload"]

    with pytest.raises(ModelFitError) as exc:
        stepmodel.fit(baseline)

    assert str(exc.value) == "cannot fit: the baseline has no upload timings"


def test_a_baseline_with_phases_on_only_some_steps_is_refused():
    baseline = make_pass()
    del baseline[10]["phases"]["host_optim"]

    with pytest.raises(ModelFitError, match="1 of the baseline's 15 steady steps have no host"):
        stepmodel.fit(baseline)


def test_a_baseline_with_resident_layers_is_refused():
    with pytest.raises(ModelFitError, match="has 4 resident layers; the model needs an "
                                            "all-offload baseline"):
        stepmodel.fit(make_pass(resident_per_card=4))


def test_a_config_with_more_resident_layers_than_a_card_holds_is_bad_input():
    with pytest.raises(BadInput, match="9 resident layers per card is more than the 8 layers"):
        Shape(layers=32, cards=4, resident_per_card=9)
