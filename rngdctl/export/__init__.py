"""The experiment note: one markdown file and its data folder, from the store.

``write_note(store, run_ids, out_dir)`` writes ``<out_dir>/<date>-<slug>.md``
and ``<out_dir>/data/<slug>/`` in the form of the reference record
(``shared/reference/resident-200-steps-pr.txt``): code version, hardware,
recipe, how the run was launched, the pre-submit checks and their load range,
then per run its steps, step time, drift, loss table, step-1 loss, step-model
table and events. Several runs give one note with a comparison table.

Every number in the note is computed from the store (through ``daemon.stepmodel.stats``);
nothing is typed. The package reads the store only. Its parts:

- ``words``: numbers and configs as the note prints them;
- ``collect``: the numbers for each run (``RunReport``, ``collect``, ``build``);
- ``render``: the markdown from the reports;
- ``write``: the data folder, the note file, the design table.
"""

from rngdctl.export.collect import (
    GateSummary,
    ModelRow,
    RunReport,
    attempt_starts,
    build,
    collect,
    error_split_notes,
    loss_rows,
    model_rows,
    slugify,
    summarize_gates,
)
from rngdctl.export.render import DRIFT_TOLERANCE, job_launched, render, went_wrong
from rngdctl.export.words import (
    describe_placement,
    describe_recipe,
    load,
    load_span,
    loss,
    percent,
    rate,
    secs,
)
from rngdctl.export.write import (
    check_design,
    design_rows,
    note_slug,
    note_text,
    step_log,
    update_design,
    write_data,
    write_note,
    write_note_reports,
)

__all__ = [
    "DRIFT_TOLERANCE",
    "GateSummary",
    "ModelRow",
    "RunReport",
    "attempt_starts",
    "build",
    "check_design",
    "collect",
    "describe_placement",
    "describe_recipe",
    "design_rows",
    "error_split_notes",
    "job_launched",
    "load",
    "load_span",
    "loss",
    "loss_rows",
    "model_rows",
    "note_slug",
    "note_text",
    "percent",
    "rate",
    "render",
    "secs",
    "slugify",
    "step_log",
    "summarize_gates",
    "update_design",
    "went_wrong",
    "write_data",
    "write_note",
    "write_note_reports",
]
