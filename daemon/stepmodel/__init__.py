"""The step-time model: fit its terms from an all-offload baseline, predict any config and
compare the prediction with what was measured.

Torch-free: the daemon, the CLI, the TUI and export all import it, from the package
(``from daemon import stepmodel``); each module holds one idea, its docstring says which.
Plain step dicts (rows of ``Store.steps`` or parsed ``step`` records) or a pass's
``stats.PassStats`` in, frozen dataclasses out; ``ModelFitError`` when a baseline cannot
give the terms, ``BadInput`` for a config the trainer cannot place. The form, and where each
term comes from: docs/design.md, "## Step-time model" (in code: ``fit._form``). Every term
is a median over the baseline's steps 6-N, so predicting its own config gives its median.
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
    "compare": ("MEDIAN", "MEDIAN_SE", "PAIRED", "Z95", "Comparison", "compare", "format_error",
                "format_seconds", "format_verdict", "median_se", "relative_error"),
    "design_table": ("TABLE_BEGIN", "TABLE_END", "TABLE_HEADER", "DesignRow", "design_row",
                     "update_design_table"),
    "fit": ("ESTIMATED", "NEEDED", "OPTIONAL", "SPLIT", "Prediction", "Steps", "Term",
            "Terms", "edge_params", "fit", "median_words", "predict", "predict_step"),
    "memory": ("CARD_GB", "HOST_BYTES", "HOST_PLAYS_CARD", "OFFLOADED_BYTES",
               "RESIDENT_BYTES", "MemoryCheck", "card_bytes", "card_gb_for", "host_bytes",
               "host_memory_check", "host_plays_cards", "memory_check"),
    "pairing": ("paired", "paired_window"),
    "runs": ("Answer", "Baseline", "Fitted", "baseline_of", "fitted", "for_run", "hardware_of",
             "model_config", "terms_for_run"),
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
