"""The verdict: the error with its 95 % interval, its terms, and the host-changed notice."""

from __future__ import annotations

import pytest
from synthetic_logs import KNOWN, make_pass

from daemon import stepmodel

#: KNOWN with the host optimizer 95 times smaller: a step that is mostly compute.
COMPUTE_BOUND = {**KNOWN, "host_optim": KNOWN["host_optim"] / 95}


def compared(measured_terms: dict, *, wander: float | None = None,
             wandering: str = "fwd_bwd", baseline: dict = KNOWN):
    """The model from a steady baseline against a main pass measured with other terms."""
    terms = stepmodel.fit(make_pass(baseline))
    measured = make_pass(measured_terms, label="main")
    if wander is not None:
        # The main pass's fwd_bwd (or ``wandering``) wanders by +-wander from step to step.
        for n, s in enumerate(measured):
            f = 1 + wander * (-1, -0.5, 0, 0.5, 1)[n % 5]
            s["step_s"] += s["phases"][wandering] * (f - 1)
            s["phases"][wandering] *= f
    return stepmodel.compare(stepmodel.predict(terms, terms.baseline), measured)


def test_the_terms_shares_add_up_to_the_error():
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.1, "upload": KNOWN["upload"] * 2})
    shares = {r["phase"]: r["share"] for r in c.split()}
    assert sum(shares.values()) == pytest.approx(c.error)
    assert shares["fwd_bwd"] < 0 and shares["upload"] < 0
    # Largest share first: here the host optimizer dominates the step, so the doubled
    # uploads (2 x 0.22 s) weigh more than 10 % of fwd_bwd (0.08 s).
    assert c.error_terms().startswith("upload -2.9 %, fwd_bwd -1.0 %")


def test_compute_that_moved_outside_its_interval_says_the_host_changed_and_gives_the_rest():
    # The host got 10 % slower at the same device work; the embed and head's device
    # optimizer 2x slower (a model miss: no work of the baseline's says what it takes).
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.1,
                  "device_optim_fixed": KNOWN["device_optim_fixed"] * 2})

    assert c.compute_moved == pytest.approx(0.10)
    assert c.compute_interval < 0.10
    assert c.host_changed
    # The rest of the model: only the device optimizer's miss is left.
    device_share = next(r["share"] for r in c.split() if r["phase"] == "device_optim")
    assert c.error_of_rest == pytest.approx(device_share)
    notice = c.host_notice()
    assert notice.startswith("the host changed between the passes: the same device compute "
                             "(fwd_bwd) took 10.0 % longer in the asked config than in the "
                             "baseline, outside its 95 % interval")
    assert notice.endswith(f"the rest of the model is off by {c.error_of_rest * 100:+.1f} %")
    # SPREAD gives each pass's steps the same spread: 1.3 % either way at 95 %.
    assert c.short_notice() == (f"host changed: compute +10.0 % (±1.3 %), rest of the model "
                                f"{c.error_of_rest * 100:+.1f} %")
    d = c.as_dict()
    assert d["host_changed"] is True and d["host_notice"] == notice


def test_a_per_layer_term_that_moved_is_the_models_share_of_the_error_not_the_host():
    # Uploads took twice as long, the device compute held: one rule, from the compute
    # alone (the only term whose work is the same whatever the placement), so the
    # uploads are the error's largest share, and no notice excuses them.
    c = compared({**KNOWN, "upload": KNOWN["upload"] * 2})
    assert not c.host_changed and c.host_notice() is None and c.short_notice() is None
    assert c.error_terms().startswith("upload ")


def test_a_steady_host_gives_no_notice():
    steady = compared(KNOWN)
    c = compared({**KNOWN, "compute": KNOWN["compute"] * (1 + steady.compute_interval / 2)})
    assert not c.host_changed and c.host_notice() is None
    assert c.as_dict()["host_notice"] is None


def test_a_move_inside_the_passes_own_interval_is_not_called_a_host_change():
    # 5 % slower, but the main pass's own fwd_bwd spreads +-20 % from step to step.
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.05}, wander=0.2)
    assert c.compute_moved == pytest.approx(0.05, abs=0.01)
    assert c.compute_interval > 0.05
    assert not c.host_changed


def test_the_interval_is_1_96_standard_errors_of_the_two_passes_medians():
    # One after the other: each pass's median has the standard error 1.2533 sigma /
    # sqrt(n), sigma = IQR / 1.349, relative to the median; the ratio's combines both.
    import math
    import statistics

    baseline, main = make_pass(KNOWN), make_pass(KNOWN, label="main", steps=35)
    terms = stepmodel.fit(baseline)
    c = stepmodel.compare(stepmodel.predict(terms, terms.baseline), main)

    def se(steps):
        times = [s["step_s"] for s in steps if s["step"] > 5]
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
        return 1.2533 / 1.349 * (q3 - q1) / statistics.median(times) / math.sqrt(len(times))

    assert c.interval == pytest.approx(1.96 * math.hypot(se(baseline), se(main)), rel=1e-12)
    assert c.as_dict()["interval"] == c.interval
    assert c.verdict() == f"+0.0 % (95 % interval ±{c.interval * 100:.1f} %)"


def test_a_large_error_on_a_noisy_host_has_an_interval_that_covers_it():
    # The main pass's fwd_bwd 30 % slower but wandering +-80 % from step to step: the
    # run cannot check the model closer than its interval, and the interval says so.
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.3}, wander=0.8)
    assert not c.host_changed
    assert abs(c.error) > 0.03 and abs(c.error) <= c.interval


def test_an_error_on_a_steady_host_is_outside_its_narrow_interval():
    # The embed and head's device optimizer 10x what the model says, on a steady host:
    # the error is the model's, and its interval does not cover it.
    c = compared({**KNOWN, "device_optim_fixed": KNOWN["device_optim_fixed"] * 10})
    assert not c.host_changed
    assert abs(c.error) > 3 * c.interval


def test_a_pass_too_short_to_spread_says_it_has_no_interval():
    terms = stepmodel.fit(make_pass(KNOWN))
    c = stepmodel.compare(stepmodel.predict(terms, terms.baseline),
                          make_pass(KNOWN, label="main", steps=1))
    assert c.as_dict()["interval"] is None
    assert c.verdict().endswith("(no interval: too few steps)")


def test_the_note_splits_the_error_by_phase_and_says_when_the_host_changed(store, recorded_run):
    from rngdctl import export

    baseline = make_pass(raw=False)
    slower = make_pass({**KNOWN, "compute": KNOWN["compute"] * 1.1}, label="main", raw=False)
    run = recorded_run(baseline, slower)

    notes = export.collect(store, run).model_notes

    c = stepmodel.for_run(store, run)
    fwd = next(r for r in c.split() if r["phase"] == "fwd_bwd")
    assert f"| fwd_bwd | {export.secs(fwd['model_s'])} | {export.secs(fwd['measured_s'])} | " \
           f"{fwd['share'] * 100:+.1f} % |" in notes
    assert f"**{c.host_notice()[0].upper()}{c.host_notice()[1:]}.**" in notes


def test_the_note_of_a_steady_run_has_the_split_but_no_notice(store, recorded_run):
    from rngdctl import export

    run = recorded_run(make_pass(raw=False), make_pass(label="main", raw=False))
    notes = export.collect(store, run).model_notes
    assert "| phase | model | measured | share of error |" in notes
    assert not any("host changed" in line for line in notes)


def test_the_interval_the_notice_allows_shrinks_with_more_steps():
    short = compared({**KNOWN, "compute": KNOWN["compute"] * 1.08}, wander=0.2)
    terms = stepmodel.fit(make_pass(steps=65))
    measured = make_pass({**KNOWN, "compute": KNOWN["compute"] * 1.08}, label="main", steps=65)
    for n, s in enumerate(measured):
        f = 1 + 0.2 * (-1, -0.5, 0, 0.5, 1)[n % 5]
        s["step_s"] += s["phases"]["fwd_bwd"] * (f - 1)
        s["phases"]["fwd_bwd"] *= f
    long = stepmodel.compare(stepmodel.predict(terms, terms.baseline), measured)
    # Four times the steady steps (60 against 15), the same step-to-step spread:
    # each median is twice as sure, and the same 8 % move now says the host changed.
    assert long.compute_interval == pytest.approx(short.compute_interval / 2, rel=0.05)
    assert long.interval == pytest.approx(short.interval / 2, rel=0.05)
    assert long.host_changed and not short.host_changed
