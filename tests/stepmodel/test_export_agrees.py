"""The note and the design table show the step-time model's own numbers."""

from __future__ import annotations

from synthetic_logs import KNOWN, make_pass

from daemon import stepmodel


def test_the_note_shows_the_modules_error_spread_and_terms(store, recorded_run, tmp_path):
    from rngdctl import export

    run = recorded_run(make_pass(cards=2, raw=False),
                       make_pass({**KNOWN, "upload": 0.02}, cards=2, resident_per_card=4,
                                 label="main", raw=False))
    c = stepmodel.for_run(store, run)

    text = export.write_note(store, [run], tmp_path / "experiments", now=0).read_text()

    assert (f"| {export.secs(c.model_s)} | {export.percent(c.error)} |") in text
    assert (f"(the steps' interquartile range {export.secs(c.iqr[0])}–"
            f"{export.secs(c.iqr[1])})") in text
    assert f"The phase furthest from its prediction is {c.worst_phase}." in text
    for term in c.prediction.terms.all():
        assert f"| {term.name} | {export.secs(term.seconds)} |" in text


def test_export_update_design_writes_the_modules_row(store, recorded_run, tmp_path):
    from rngdctl import export

    run = recorded_run(make_pass(raw=False),
                       make_pass(resident_per_card=8, label="main", raw=False))
    design = tmp_path / "design.md"
    design.write_text("# rngdctl design\n\n## Step-time model\n\nThe form.\n")
    c = stepmodel.for_run(store, run)

    export.update_design(store, export.build(store, [run]), design)

    row = stepmodel.design_row(c, run=export.build(store, [run])[0].label,
                               hardware=stepmodel.hardware_of(store, run))
    assert row.markdown() in design.read_text()
    assert row.markdown().endswith(f"| {stepmodel.format_error(c.error)} |")
