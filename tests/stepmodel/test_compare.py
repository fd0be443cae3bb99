"""Model against measured: median of steps 6-N, its spread, the error and the split by phase."""

from __future__ import annotations

import pytest
from synthetic_logs import KNOWN, SPREAD, expected_step_s, make_pass

from daemon import stepmodel
from daemon.stepmodel import SPLIT, Shape


def test_the_error_is_model_minus_measured_over_measured_against_the_median_of_steps_6_n():
    terms = stepmodel.fit(make_pass())
    # Measured 10 % slower in fwd_bwd than the terms say.
    measured = make_pass({**KNOWN, "compute": KNOWN["compute"] * 1.1}, label="main")

    c = stepmodel.compare(stepmodel.predict(terms, terms.baseline), measured)

    truth = expected_step_s({**KNOWN, "compute": KNOWN["compute"] * 1.1})
    assert c.measured_s == pytest.approx(truth)
    assert c.error == pytest.approx((expected_step_s() - truth) / truth)
    assert (c.first_step, c.last_step, c.steps) == (6, 20, 15)


def test_the_spread_is_the_interquartile_range_of_the_same_steps():
    measured = make_pass(label="main")
    c = stepmodel.compare(stepmodel.predict(stepmodel.fit(make_pass()),
                                            Shape.of_step(measured[-1])), measured)

    # Steps 6-20 cycle three times through SPREAD: quartiles at its 2nd and 4th values.
    assert c.iqr == pytest.approx((expected_step_s() * SPREAD[1], expected_step_s() * SPREAD[3]))


def test_the_split_names_the_phase_that_was_wrong():
    terms = stepmodel.fit(make_pass())
    slow_upload = {**KNOWN, "upload": KNOWN["upload"] * 3}
    measured = make_pass(slow_upload, label="main")

    c = stepmodel.compare(stepmodel.predict(terms, terms.baseline), measured)

    assert c.worst_phase == "upload"
    rows = {r["phase"]: r for r in c.split()}
    assert list(rows) == list(SPLIT)
    assert rows["upload"]["diff_s"] == pytest.approx(-2 * KNOWN["upload"] * 32)
    assert rows["fwd_bwd"]["diff_s"] == pytest.approx(0.0, abs=1e-12)


def test_tokens_per_second_are_the_median_tokens_over_the_step_time():
    measured = make_pass(label="main")
    c = stepmodel.compare(stepmodel.predict(stepmodel.fit(make_pass()),
                                            Shape.of_step(measured[-1])), measured)

    assert c.measured_tokens_per_s == pytest.approx(2048 / expected_step_s())
    assert c.model_tokens_per_s == pytest.approx(c.measured_tokens_per_s)
    assert c.prediction.tokens_per_s == pytest.approx(2048 / c.model_s)


def test_the_comparison_as_json_carries_the_numbers_and_the_terms_with_their_sources():
    measured = make_pass(label="main")
    c = stepmodel.compare(stepmodel.predict(stepmodel.fit(make_pass()),
                                            Shape.of_step(measured[-1])), measured)

    d = c.as_dict()

    assert d["error"] == c.error and d["iqr_s"] == list(c.iqr)
    sources = {t["name"]: t["source"] for t in d["prediction"]["terms"]}
    assert sources["upload"] == "baseline, median of steps 6-20"
    assert sources["device_optim"].startswith("estimated")
