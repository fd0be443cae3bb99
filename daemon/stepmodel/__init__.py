"""The step-time model: fit its terms from an all-offload baseline, predict any config.

Torch-free: the daemon, the CLI, the TUI and export all import it.

Modules, one idea each; import from the package, ``from daemon import
stepmodel``, which re-exports every public name: ``shape`` (a config as the
model sees it, the trainer's placement), ``fit`` (the terms and the
prediction), ``pairing`` (interleaved passes: the window and the block
pairs), ``compare`` (a prediction against what was measured: the error, its
terms, the host notice), ``memory`` (whether a placement fits), ``runs`` (the
model for stored runs) and ``design_table`` (the table in docs/design.md).

API (plain step dicts in, frozen dataclasses out; a step dict is a row of
``Store.steps`` or a parsed JSON ``step`` record):

- ``fit(baseline_steps, baseline_config=None, *, resident_steps=None, ...) -> Terms``
  Terms from the medians of the baseline's phases over steps 6-N and its
  start config's optimizer calibration. A resident pass (any pass with
  resident layers on the same hardware) gives the device optimizer's cost
  per layer, else the calibration; without either that term is estimated
  and marked.
  Raises ``ModelFitError`` ("cannot fit: the baseline has no upload timings").
- ``Shape``: a config as the model sees it (layers, cards, resident per card,
  accumulation, sequence length, micro-batch). ``Shape.of_steps(steps)``
  reads it from step records, ``Shape.of_config(config)`` from a start config.
- ``predict(terms, target: Shape) -> Prediction``: step time, tok/s and the
  predicted split by phase.
- ``compare(prediction, measured_steps, last=, interleave=) -> Comparison``:
  the measured median of steps 6-N (6-last) with its interquartile range, ``error = (model - measured) /
  measured``, and the measured split by phase beside the predicted one.
- ``for_run(store, run_id) -> Comparison | None``: the run's main pass against
  the model fitted from its own baseline pass (None when it has no baseline
  pass or no main steps yet). ``terms_for_run(store, run_id)`` gives the terms.
  When the trainer interleaved the passes, only the main steps that ran
  alongside the baseline's are compared (``paired_window``), paired with the
  baseline's block by block (``paired``): every term, each baseline step
  giving the config's predicted phases from its own (``predict_step``).
- ``model_config(store, run_id, cards=, resident=, ...) -> Answer``: a config
  that has not run, from a stored run's all-offload pass (``baseline_of``),
  with its memory check; what ``rngdctl model`` prints.
- ``memory_check(target, params_per_layer=, card_gb=, edge=) -> MemoryCheck``:
  whether C x R resident layers fit on the cards by the trainer's own
  accounting (``card_bytes``); ``host_memory_check`` the same for the host
  (``host_bytes``: the offloaded layers, and the cards when the host plays them).
- ``design_row(comparison, run=, hardware=)``, ``hardware_of(store, run_id)``
  and ``update_design_table(design_md_path, rows)``: the step-model table kept
  in docs/design.md between marker comments (``rngdctl export --update-design``).

Errors: ``ModelFitError`` when a baseline cannot give the terms (one line,
"cannot fit: the baseline has no upload timings"); ``BadInput`` for a config
the trainer cannot place.

The form (docs/design.md "## Step-time model" says why): the trainer
(trainer/engine.py) times its phases one after another, uploads every
offloaded layer once a step and downloads its gradient once a step, so a step
is the sum of its phases:

    step = fwd_bwd + upload + download + host_optim + device_optim + wait + unclaimed
    fwd_bwd      = T_dev * (tokens / tokens_b) * (L / L_b)
    upload       = u * offloaded
    download     = d * offloaded
    host_optim   = F + h * offloaded      (clip norm and fused AdamW on the host; 0 at none)
    device_optim = g0 + g * resident      (g0: embed, norm and head, on the cards always)
                   + (F - c)              (only when no layer is offloaded)
    wait, unclaimed: as in the baseline

``h``, ``g`` and ``c`` (the host optimizer call's own cost) come from the
baseline's optimizer calibration (trainer/calibrate.py, in its start config)
where it has one, and ``F`` is the baseline's host optimizer less ``h`` per
layer; without one, ``F = c = 0``, ``h`` is the host optimizer per layer and
``g`` is estimated as ``h`` (docs/design.md "### Terms").

``resident = cards * resident_per_card``, ``offloaded = L - resident`` and
``_b`` marks the baseline. Every term is a median over the baseline's steps
6-N, so predicting the baseline's own config gives its measured median.
"""

from __future__ import annotations

import importlib
import sys
import types

#: Each module of the package and the public names it defines. The package loads a module
#: on the first use of one of its names, so a command that needs only the placement rule
#: (``submit``'s ``check_placement``, in ``shape``) does not load the fit, the comparison
#: and the statistics they read: ``submit``, ``runs`` and ``show`` start within 4x
#: ``python -c pass`` (bench/cli_startup.py, tests/spine/test_startup_imports.py).
_MODULES = {
    "compare": ("HOST_MOVED", "MEDIAN_SE", "QUIET_ERROR", "Comparison", "compare",
                "format_error", "format_seconds", "median_se", "relative_error"),
    "design_table": ("TABLE_BEGIN", "TABLE_END", "TABLE_HEADER", "DesignRow", "design_row",
                     "update_design_table"),
    "fit": ("ESTIMATED", "NEEDED", "OPTIONAL", "SPLIT", "Prediction", "Steps", "Term",
            "Terms", "edge_params", "fit", "predict", "predict_step"),
    "memory": ("CARD_GB", "HOST_BYTES", "HOST_PLAYS_CARD", "OFFLOADED_BYTES",
               "RESIDENT_BYTES", "MemoryCheck", "card_bytes", "card_gb_for", "host_bytes",
               "host_memory_check", "host_plays_cards", "memory_check"),
    "pairing": ("paired", "paired_medians", "paired_window"),
    "runs": ("Answer", "Baseline", "baseline_of", "for_run", "hardware_of", "model_config",
             "terms_for_run"),
    "shape": ("Shape", "blocks", "check_placement"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


class _Package(types.ModuleType):
    """This package: each public name loaded with its module on first use."""

    def __getattr__(self, name):  # only for names not loaded yet
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{self.__name__}.{module}"), name)
        super().__setattr__(name, value)
        return value

    def __setattr__(self, name, value):
        # The import system sets each loaded module on its package. Two share their name
        # with the function they define (``compare``, ``fit``): the package's name stays
        # the function's, as when this package imported every module at once.
        if isinstance(value, types.ModuleType) and name in _WHERE:
            return
        super().__setattr__(name, value)

    def __dir__(self):
        return sorted({*super().__dir__(), *_WHERE})


sys.modules[__name__].__class__ = _Package

__all__ = [
    "CARD_GB",
    "ESTIMATED",
    "HOST_BYTES",
    "HOST_MOVED",
    "HOST_PLAYS_CARD",
    "MEDIAN_SE",
    "NEEDED",
    "OFFLOADED_BYTES",
    "OPTIONAL",
    "QUIET_ERROR",
    "RESIDENT_BYTES",
    "SPLIT",
    "TABLE_BEGIN",
    "TABLE_END",
    "TABLE_HEADER",
    "Answer",
    "Baseline",
    "Comparison",
    "DesignRow",
    "MemoryCheck",
    "Prediction",
    "Shape",
    "Steps",
    "Term",
    "Terms",
    "baseline_of",
    "blocks",
    "card_bytes",
    "card_gb_for",
    "check_placement",
    "compare",
    "design_row",
    "edge_params",
    "fit",
    "for_run",
    "format_error",
    "format_seconds",
    "hardware_of",
    "host_bytes",
    "host_memory_check",
    "host_plays_cards",
    "median_se",
    "memory_check",
    "model_config",
    "paired",
    "paired_medians",
    "paired_window",
    "predict",
    "predict_step",
    "relative_error",
    "terms_for_run",
    "update_design_table",
]
