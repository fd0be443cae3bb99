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
        assert f"{row['error'] * 100:+.1f} %" in line
    assert "(median of steps 6-12)" in text
    assert "host changed" not in text
    assert model["host_changed"] is False and model["host_notice"] is None


def test_show_says_plainly_when_the_host_changed_between_the_passes(store, rngdctl):
    # The asked config's device compute took 20 % longer than the baseline's, for the same work.
    expected, text, model = shown(store, rngdctl, main_compute=0.120)
    assert expected.host_changed
    notice = [line for line in text.splitlines() if "the host changed between the passes" in line]
    assert len(notice) == 1
    assert "20.0 % longer in the asked config than in the baseline" in notice[0]
    assert f"the rest of the model is off by {expected.error_without_compute * 100:+.1f} %" \
        in notice[0]
    assert model["error_without_compute"] == expected.error_without_compute


def test_show_says_a_large_error_is_inside_a_busy_hosts_noise(store, rngdctl):
    # The asked config's device compute 20 % slower and wandering +-40 % from step to
    # step: no move beyond chance, but an error far past the quiet-host figure.
    expected, text, model = shown(store, rngdctl, main_compute=0.120, main_jitter=0.4)
    assert not expected.host_changed and abs(expected.error) > stepmodel.QUIET_ERROR
    notice = [line for line in text.splitlines() if "the host was busy" in line]
    assert len(notice) == 1
    assert f"may differ by up to {expected.compute_spread * 100:.1f} % by chance" in notice[0]
    assert model["busy_notice"] == expected.busy_notice() and model["host_notice"] is None


def test_show_of_a_steady_run_says_nothing_of_a_busy_host(store, rngdctl):
    _, text, model = shown(store, rngdctl)
    assert "busy" not in text and model["busy_notice"] is None


def test_show_names_the_cpu_placement_beside_the_host_when_resident_layers_computed_faster(
        store, rngdctl):
    # The asked config (2 of 4 layers resident) computed 3 % faster than the baseline: on cpu
    # cards the placement alone can do that, on a card it cannot.
    on_cpu, text, model = shown(store, rngdctl, main_compute=0.097, backend="cpu")
    assert on_cpu.host_changed and model["placement_may_explain"] is True
    notice = next(line for line in text.splitlines() if "the host changed" in line)
    assert "3.0 % less time in the asked config" in notice
    assert "so this may be the placement rather than the host" in notice
    on_card, text, model = shown(store, rngdctl, main_compute=0.097, backend="furiosa:0")
    assert on_card.host_changed and model["placement_may_explain"] is False
    assert "placement" not in text


def test_a_compute_that_moved_past_what_the_placement_can_do_is_the_hosts_alone(store, rngdctl):
    # 10 % faster on cpu cards: more than resident layers make (CPU_PLACEMENT).
    expected, text, model = shown(store, rngdctl, main_compute=0.090, backend="cpu")
    assert expected.host_changed and model["placement_may_explain"] is False
    assert "placement" not in text
