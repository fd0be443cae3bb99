"""The error split into its terms, and the notice that the host changed between the passes."""

from __future__ import annotations

import pytest
from synthetic_logs import KNOWN, make_pass

from daemon import stepmodel
from daemon.stepmodel import HOST_MOVED

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
    shares = {r["phase"]: r["error"] for r in c.split()}
    assert sum(shares.values()) == pytest.approx(c.error)
    assert shares["fwd_bwd"] < 0 and shares["upload"] < 0
    # Largest share first: here the host optimizer dominates the step, so the doubled
    # uploads (2 x 0.22 s) weigh more than 10 % of fwd_bwd (0.08 s).
    assert c.error_terms().startswith("upload -2.9 %, fwd_bwd -1.0 %")


def test_compute_that_moved_beyond_the_spread_says_the_host_changed_and_gives_the_rest_apart():
    # The host got 10 % slower at the same device work; the embed and head's device
    # optimizer 2x slower (a model miss: no work of the baseline's says what it takes).
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.1,
                  "device_optim_fixed": KNOWN["device_optim_fixed"] * 2})

    assert c.compute_moved == pytest.approx(0.10)
    assert c.host_changed and c.moved_terms() == ["fwd_bwd"]
    # The rest of the model: only the device optimizer's miss is left.
    device_share = next(r["error"] for r in c.split() if r["phase"] == "device_optim")
    assert c.error_without_compute == pytest.approx(device_share)
    assert c.error_of_rest == c.error_without_compute
    notice = c.host_notice()
    assert notice.startswith("the host changed between the passes")
    assert "10.0 % longer" in notice and f"{c.error_without_compute * 100:+.1f} %" in notice
    d = c.as_dict()
    assert d["host_changed"] is True and d["host_notice"] == notice


def test_a_per_layer_term_that_moved_with_the_host_is_named_and_left_out_of_the_rest():
    # One after the other, on a host that got busier: the same device work 10 % slower,
    # and the host optimizer's work per offloaded layer (the same in both passes) 30 %.
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.1,
                  "host_optim": KNOWN["host_optim"] * 1.3})

    assert c.moved_terms() == ["fwd_bwd", "host_optim"]
    # Apart from both, nothing is left: the model is right about the rest.
    assert abs(c.error_of_rest) < 1e-9 and c.error_without_compute < -0.15
    notice = c.host_notice()
    assert "the same host optimizer (host_optim) per offloaded layer took 30.0 % longer" in notice
    assert notice.endswith("the rest of the model is off by +0.0 %")
    # SPREAD gives every phase the same step-to-step spread: 1.4 % either way.
    assert c.short_notice() == ("host changed: compute +10.0 % (spread 1.4 %), "
                                "host_optim +30.0 % (spread 1.4 %), rest of the model +0.0 %")


def test_a_per_layer_term_that_moved_alone_says_the_host_changed():
    # The device compute held, but uploads took twice as long: a neighbour on the bus.
    c = compared({**KNOWN, "upload": KNOWN["upload"] * 2})
    assert c.moved_terms() == ["upload"] and c.host_changed
    assert c.host_notice().startswith("the host changed between the passes: the same upload "
                                      "per offloaded layer took 100.0 % longer")


def test_a_per_layer_term_that_moved_by_little_of_the_step_is_the_models():
    # Downloads 50 % slower, but they are 0.5 % of the step: not worth calling the host.
    c = compared({**KNOWN, "download": KNOWN["download"] * 1.5})
    assert c.moved("download") == pytest.approx(0.5)
    assert not c.host_changed and c.host_notice() is None and c.short_notice() is None


def test_a_steady_host_gives_no_notice():
    c = compared({**KNOWN, "compute": KNOWN["compute"] * (1 + HOST_MOVED / 2)})
    assert not c.host_changed and c.host_notice() is None
    assert c.as_dict()["host_notice"] is None


def test_a_move_inside_the_passes_own_spread_is_not_called_a_host_change():
    # 5 % slower, but the main pass's own fwd_bwd spreads +-20 % from step to step.
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.05}, wander=0.2)
    assert c.compute_moved == pytest.approx(0.05, abs=0.01)
    assert c.compute_spread > 0.05
    assert not c.host_changed


def test_a_large_error_inside_a_busy_hosts_spread_is_called_the_hosts_not_the_models():
    # The main pass's fwd_bwd 30 % slower but wandering +-80 % from step to step: nothing
    # moved beyond chance, yet the error is past the quiet-host figure.
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.3}, wander=0.8)
    assert not c.host_changed and abs(c.error) > stepmodel.QUIET_ERROR
    assert c.compute_spread >= abs(c.error)
    assert c.busy_notice().startswith("the host was busy")
    assert f"up to {c.compute_spread * 100:.1f} % by chance, more than this error" \
        in c.busy_notice()
    assert c.short_busy_notice() == \
        f"busy host: the error is inside the passes' {c.compute_spread * 100:.1f} % spread"
    assert c.as_dict()["busy_notice"] == c.busy_notice()


def test_a_busy_host_that_slowed_the_optimizer_not_the_compute_is_still_called_busy():
    # A hog that takes the host optimizer (most of this step) 10 % slower on average,
    # wandering +-50 % from step to step, while the compute holds: the compute's spread
    # is below the error, the whole step's is not.
    c = compared({**KNOWN, "host_optim": KNOWN["host_optim"] * 1.1}, wander=0.5,
                 wandering="host_optim")
    assert not c.host_changed and abs(c.error) > stepmodel.QUIET_ERROR
    assert c.compute_spread < abs(c.error) <= c.step_spread
    assert f"up to {c.step_spread * 100:.1f} % by chance" in c.busy_notice()
    assert c.as_dict()["step_spread"] == c.step_spread


def test_a_small_error_on_a_busy_host_needs_no_excuse():
    # The same +-20 % wander, but the error is within the quiet-host figure.
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.05}, wander=0.2)
    assert c.compute_spread > stepmodel.QUIET_ERROR and abs(c.error) <= stepmodel.QUIET_ERROR
    assert c.busy_notice() is None and c.short_busy_notice() is None


def test_an_error_past_a_steady_hosts_spread_stays_the_models():
    # The embed and head's device optimizer 10x what the model says, on a steady host:
    # the error is the model's, and no notice excuses it.
    c = compared({**KNOWN, "device_optim_fixed": KNOWN["device_optim_fixed"] * 10})
    assert abs(c.error) > stepmodel.QUIET_ERROR > c.compute_spread
    assert not c.host_changed and c.busy_notice() is None


def test_a_compute_inside_its_spread_that_takes_the_error_past_every_spread_is_called_busy():
    # A step that is mostly compute (as on the cpu backend): the compute 3.5 % slower but
    # wandering +-6 % from step to step (inside its spread), and the rest of the model
    # off on the same side by 2.5 % (the embed and head's device optimizer): the sum is
    # past both spreads, yet only the compute, chance, takes it past the quiet figure.
    c = compared({**COMPUTE_BOUND, "compute": COMPUTE_BOUND["compute"] * 1.035,
                  "device_optim_fixed": COMPUTE_BOUND["device_optim_fixed"] * 1.7},
                 wander=0.06, baseline=COMPUTE_BOUND)
    assert not c.host_changed
    assert abs(c.compute_moved) <= c.compute_spread < abs(c.error)
    assert c.step_spread < abs(c.error)
    assert abs(c.error_without_compute) <= stepmodel.QUIET_ERROR < abs(c.error)
    notice = c.busy_notice()
    assert notice.startswith("the host was busy: the same device compute")
    assert f"inside the {c.compute_spread * 100:.1f} % that its step-to-step variation" in notice
    assert f"apart from the compute the model is off by {c.error_without_compute * 100:+.1f} %" \
        in notice
    assert c.short_busy_notice() == (
        f"busy host: compute {c.compute_moved * 100:+.1f} % inside its "
        f"{c.compute_spread * 100:.1f} % spread, rest of the model "
        f"{c.error_without_compute * 100:+.1f} %")
    assert c.as_dict()["busy_notice"] == notice


def test_a_compute_inside_its_spread_does_not_excuse_a_rest_past_the_quiet_figure():
    # The same wandering compute, but the device optimizer's miss alone is past 3 %.
    c = compared({**COMPUTE_BOUND, "compute": COMPUTE_BOUND["compute"] * 1.035,
                  "device_optim_fixed": COMPUTE_BOUND["device_optim_fixed"] * 2},
                 wander=0.06, baseline=COMPUTE_BOUND)
    assert abs(c.compute_moved) <= c.compute_spread
    assert abs(c.error_without_compute) > stepmodel.QUIET_ERROR
    assert c.busy_notice() is None and c.short_busy_notice() is None


def test_a_host_that_changed_gets_the_change_notice_not_the_busy_one():
    c = compared({**KNOWN, "compute": KNOWN["compute"] * 1.1})
    assert c.host_changed and c.busy_notice() is None and c.short_busy_notice() is None


def test_the_note_splits_the_error_by_phase_and_says_when_the_host_changed(store, recorded_run):
    from rngdctl import export

    baseline = make_pass(raw=False)
    slower = make_pass({**KNOWN, "compute": KNOWN["compute"] * 1.1}, label="main", raw=False)
    run = recorded_run(baseline, slower)

    notes = export.collect(store, run).model_notes

    c = stepmodel.for_run(store, run)
    fwd = next(r for r in c.split() if r["phase"] == "fwd_bwd")
    assert f"| fwd_bwd | {export.secs(fwd['model_s'])} | {export.secs(fwd['measured_s'])} | " \
           f"{fwd['error'] * 100:+.1f} % |" in notes
    assert f"**{c.host_notice()[0].upper()}{c.host_notice()[1:]}.**" in notes


def test_the_note_of_a_steady_run_has_the_split_but_no_notice(store, recorded_run):
    from rngdctl import export

    run = recorded_run(make_pass(raw=False), make_pass(label="main", raw=False))
    notes = export.collect(store, run).model_notes
    assert "| phase | model | measured | share of the error |" in notes
    assert not any("host changed" in line for line in notes)


def test_the_spread_the_notice_allows_shrinks_with_more_steps():
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
    assert long.compute_spread == pytest.approx(short.compute_spread / 2, rel=0.05)
    assert long.host_changed and not short.host_changed
