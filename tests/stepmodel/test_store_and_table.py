"""The model read from the store, the step-model table in docs/design.md, and `rngdctl model`."""

from __future__ import annotations

import json

import pytest
from synthetic_logs import KNOWN, expected_step_s, make_pass

from daemon import stepmodel
from daemon.stepmodel import DesignRow


def test_a_run_with_a_baseline_pass_is_compared_with_the_model_from_that_pass(store, recorded_run):
    baseline = make_pass(cards=2, raw=False)
    main = make_pass({**KNOWN, "compute": 0.9}, cards=2, resident_per_card=8, label="main",
                     raw=False)
    run = recorded_run(baseline, main)

    c = stepmodel.for_run(store, run)

    raw_main = [json.loads(stepmodel_line(s)) for s in main]
    direct = stepmodel.compare(stepmodel.predict(
        stepmodel.fit([json.loads(stepmodel_line(s)) for s in baseline]),
        stepmodel.Shape.of_step(raw_main[-1])), raw_main)
    assert c.error == pytest.approx(direct.error) and c.iqr == pytest.approx(direct.iqr)
    assert c.measured_s == pytest.approx(expected_step_s({**KNOWN, "compute": 0.9}, cards=2,
                                                         resident_per_card=8))
    assert c.prediction.terms.compute.source == f"run {run} baseline, median of steps 6-20"


def stepmodel_line(step) -> str:
    """The step as the trainer writes it: raw JSON with the extra keys at the top level."""
    from trainer import records

    return records.dumps(step)


def test_a_run_without_a_baseline_pass_has_no_comparison(store, recorded_run):
    run = recorded_run(make_pass(label="main", raw=False))

    assert stepmodel.for_run(store, run) is None


def test_the_design_table_goes_into_the_step_model_section_and_rows_replace_their_own(tmp_path):
    design = tmp_path / "design.md"
    design.write_text("# rngdctl design\n\n## Step-time model\n\nThe form.\n\n## Export\n\nText.\n")
    first = DesignRow("r1", "cpu", 1, 2, 0.5, 0.51, 0.02)

    stepmodel.update_design_table(design, [first, DesignRow("r2", "cpu", 2, 1, 0.4, 0.39, -0.025)])
    n = stepmodel.update_design_table(design, [DesignRow("r1", "cpu", 1, 2, 0.5, 0.5, 0.0)])

    text = design.read_text()
    assert n == 2
    assert text.index("The form.") < text.index(stepmodel.TABLE_BEGIN) < text.index("## Export")
    assert "| r1 | cpu | 1 | 2 | 500.0 ms | 500.0 ms | +0.0 % |" in text
    assert "| r2 | cpu | 2 | 1 | 400.0 ms | 390.0 ms | -2.5 % |" in text
    assert "+2.0 %" not in text
    assert text.endswith("## Export\n\nText.\n")


def test_rngdctl_model_predicts_a_config_from_a_stored_baseline(store, recorded_run, rngdctl):
    run = recorded_run(make_pass(raw=False))

    code, out, err = rngdctl("model", "--baseline", str(run), "--cards", "2", "--resident", "2",
                             "--json")

    assert code == 0, err
    answer = json.loads(out)
    # Without a resident pass, a resident layer's optimizer costs what an offloaded one's does.
    estimate = {**KNOWN, "device_optim": KNOWN["host_optim"]}
    assert answer["step_s"] == pytest.approx(expected_step_s(estimate, cards=2,
                                                             resident_per_card=2))
    assert answer["memory"]["fits"] is True
    assert answer["estimated_terms"] == ["device_optim"]


def test_rngdctl_model_says_when_the_resident_layers_would_not_fit(store, recorded_run, rngdctl):
    run = recorded_run(make_pass(raw=False))

    code, out, err = rngdctl("model", "--baseline", str(run), "--cards", "1", "--resident", "16",
                             "--card-gb", "48")

    assert code == 0, err
    assert "WOULD NOT FIT: 1 x 16 resident layers would not fit: card 0 needs" in out
    assert "upload" in out and "estimated: device_optim" in out


def test_rngdctl_model_on_a_run_without_an_all_offload_pass_is_one_line(store, recorded_run,
                                                                         rngdctl):
    run = recorded_run(make_pass(resident_per_card=2, label="main", raw=False))

    code, _, err = rngdctl("model", "--baseline", str(run), "--cards", "1", "--resident", "1")

    assert code == 1
    assert err == (f"Error: cannot fit: run {run} has no all-offload pass (submit it with "
                   "--baseline, or with --resident 0)\n")


def test_the_model_and_its_command_import_neither_torch_nor_textual():
    import subprocess
    import sys

    code = ("import sys, daemon.stepmodel, rngdctl.commands.model; "
            "print(sorted(m for m in ('torch', 'transformers', 'textual', 'kubernetes') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout

    assert out.strip() == "[]"
