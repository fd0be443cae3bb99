"""The step-time model: fit its terms from an all-offload baseline, predict any config.

Torch-free: the daemon, the CLI, the TUI and export all import it. Import from
the package (``from daemon import stepmodel``); each module holds one idea:
``shape`` (a config as the model sees it, the trainer's placement), ``fit``
(``fit`` the terms, ``predict`` a config), ``pairing`` (interleaved passes:
the window and the block pairs), ``compare`` (a prediction against what was
measured: the error with its 95 % interval, its terms, the host notice),
``memory`` (whether a placement fits on the cards and the host), ``runs``
(``for_run``: a stored run against its own baseline; ``model_config``: a
config that has not run) and ``design_table`` (the table in docs/design.md).
Plain step dicts (rows of ``Store.steps`` or parsed ``step`` records) or a
pass's ``stats.PassStats`` in, frozen dataclasses out; ``ModelFitError`` when
a baseline cannot give the terms, ``BadInput`` for a config the trainer
cannot place.

The form (docs/design.md "## Step-time model" says why): the trainer times
its phases one after another and moves every offloaded layer once a step each
way, so a step is the sum of its phases:

    step = fwd_bwd + upload + download + host_optim + device_optim + wait + unclaimed
    fwd_bwd      = T_dev * (tokens / tokens_b) * (L / L_b)
    upload       = u * offloaded
    download     = d * offloaded
    host_optim   = F + h * offloaded      (clip norm and fused AdamW on the host; 0 at none)
    device_optim = g0 + g * resident      (g0: embed, norm and head, on the cards always)
                   + (F - c)              (only when no layer is offloaded)
    wait, unclaimed: as in the baseline

``h``, ``g`` and ``c`` (the host optimizer call's own cost) come from the
baseline's optimizer calibration where it has one (a resident pass, if given,
measures ``g``), and ``F`` is the baseline's host optimizer less ``h`` per
layer; without one, ``F = c = 0``, ``h`` is the host optimizer per layer and
``g`` is estimated as ``h``. ``_b`` marks the baseline; every term is a median
over its steps 6-N, so predicting the baseline's own config gives its median.
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
    "compare": ("MEDIAN_SE", "Z95", "Comparison", "compare", "format_error",
                "format_seconds", "format_verdict", "median_se", "relative_error"),
    "design_table": ("TABLE_BEGIN", "TABLE_END", "TABLE_HEADER", "DesignRow", "design_row",
                     "update_design_table"),
    "fit": ("ESTIMATED", "NEEDED", "OPTIONAL", "SPLIT", "Prediction", "Steps", "Term",
            "Terms", "edge_params", "fit", "predict", "predict_step"),
    "memory": ("CARD_GB", "HOST_BYTES", "HOST_PLAYS_CARD", "OFFLOADED_BYTES",
               "RESIDENT_BYTES", "MemoryCheck", "card_bytes", "card_gb_for", "host_bytes",
               "host_memory_check", "host_plays_cards", "memory_check"),
    "pairing": ("paired", "paired_window"),
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

__all__: list[str] = []
__all__.extend(sorted(_WHERE))  # every public name, as ``_MODULES`` lists them
