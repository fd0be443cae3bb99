"""`rngdctl show`: the step model's error split into its terms, and the host-changed notice."""

import json

from daemon import stepmodel
from daemon.run.ingest import Ingest
from tests.spine.test_show import passes


def shown(store, rngdctl, **kw):
    run = store.add_run({"cards": 1, "resident": 2, "steps": 12, "model": "tiny-llama"})
    Ingest(store).feed(run, passes(**kw))
    _, text, _ = rngdctl("show", str(run))
    _, out, _ = rngdctl("show", str(run), "--json")
    return stepmodel.for_run(store, run), text, json.loads(out)["model"]


def test_show_lists_each_phase_measured_against_predicted_with_its_share_of_the_error(
        store, rngdctl):
    expected, text, model = shown(store, rngdctl)
    for row in expected.split():
        line = next(line for line in text.splitlines() if line.split()[:1] == [row["phase"]])
        assert f"{row['share'] * 100:+.1f} %" in line
    assert "(median of steps 6-12)" in text
    assert "host changed" not in text
    assert model["host_changed"] is False and model["host_notice"] is None
    assert model["interval"] == expected.interval > 0


def test_show_says_plainly_when_the_host_changed_between_the_passes(store, rngdctl):
    # The asked config's device compute took 20 % longer than the baseline's, for the same work.
    expected, text, model = shown(store, rngdctl, main_compute=0.120)
    assert expected.host_changed
    notice = [line for line in text.splitlines() if "the host changed between the passes" in line]
    assert len(notice) == 1
    assert "20.0 % longer in the asked config than in the baseline" in notice[0]
    assert f"the rest of the model is off by {expected.error_of_rest * 100:+.1f} %" in notice[0]
    assert model["error_of_rest"] == expected.error_of_rest
    assert model["host_notice"] == expected.host_notice()


def test_show_gives_a_large_error_on_a_noisy_host_with_the_interval_that_covers_it(
        store, rngdctl):
    # The asked config's device compute 20 % slower and wandering +-40 % from step to
    # step: no move outside its interval, and an error the run cannot tell from chance.
    expected, text, model = shown(store, rngdctl, main_compute=0.120, main_jitter=0.4)
    assert not expected.host_changed and abs(expected.error) > 0.03
    assert abs(expected.error) <= expected.interval == model["interval"]
    line = next(line for line in text.splitlines() if "step model" in line)
    assert line.endswith(f"error {expected.error * 100:+.1f} % "
                         f"(95 % interval ±{expected.interval * 100:.1f} %)")
    assert "!" not in text.split("step model", 1)[1]


def test_the_host_changed_rule_is_the_same_on_every_backend(store, rngdctl):
    # The asked config computed 3 % faster than the baseline, its steps not spread at all:
    # outside the interval on cpu cards as on a card (the placement clause is gone).
    for backend in ("cpu", "furiosa:0"):
        expected, text, model = shown(store, rngdctl, main_compute=0.097, backend=backend)
        assert expected.host_changed and model["host_changed"] is True
        assert "3.0 % less time in the asked config" in text
        assert "placement" not in text
