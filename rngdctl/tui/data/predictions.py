"""The step model, where it exists: a run's prediction and its comparison, fitted once
and read again only as often as they can change."""

from __future__ import annotations

from daemon import stepmodel
from daemon.errors import RngdctlError
from daemon.store import ACTIVE, Store
from rngdctl.tui.data.reader import Reader
from rngdctl.tui.data.views import Predicted

#: Seconds between two readings of the step model's comparison of a running run.
COMPARE_EVERY_S = 10.0


def predict_run(store: Store, run_id: int, last_main_step: dict) -> Predicted | None:
    """The step model's prediction for a run from its own baseline pass, or None.

    None when the run has no baseline pass, or the model cannot be fitted
    from it: the panels then show an en dash. Only the (short) baseline is read; the main pass's shape comes from
    its newest step, so a long run costs no more than a short one.
    """
    try:
        terms = stepmodel.terms_for_run(store, run_id)
        if terms is None:
            return None
        prediction = stepmodel.predict(terms, stepmodel.Shape.of_step(last_main_step))
    except (RngdctlError, ArithmeticError, KeyError, TypeError, ValueError):
        return None  # a baseline it cannot fit: no prediction, never a crash
    return Predicted(float(prediction.step_s), dict(prediction.phases))


def _top_terms(words: str, keep: int = 3) -> str:
    """The first ``keep`` terms of ``Comparison.error_terms`` (largest first): one panel line."""
    terms = words.split(", ")
    return ", ".join(terms[:keep]) + (", …" if len(terms) > keep else "")


class Predictions(Reader):
    """The step model's figures of the current run and the history."""

    def _prediction(self, run: dict, last_main_step: dict | None) -> Predicted | None:
        # One after the other, the baseline pass ends before the main pass
        # begins, so once the main pass has a step the prediction is final: fit
        # it once per run. Interleaved, the baseline grows beside the main pass
        # until the run ends: fit it again on each refresh (it is short).
        if run["id"] in self._predicted:
            return self._predicted[run["id"]]
        if last_main_step is None:
            return None
        value = predict_run(self.store, run["id"], last_main_step)
        if not ((run.get("config") or {}).get("interleave") and run["status"] in ACTIVE):
            self._predicted[run["id"]] = value
        return value

    def _comparison(self, run: dict, now: float):
        """``stepmodel.for_run`` of the run: once when it has ended, every COMPARE_EVERY_S while
        it runs (it reads the whole main pass)."""
        cached = self._compared.get(run["id"])
        if cached and (cached[1] == run["status"] and (run["status"] not in ACTIVE
                                                       or now - cached[0] < COMPARE_EVERY_S)):
            return cached[2]
        try:
            value = stepmodel.for_run(self.store, run["id"])
        except (RngdctlError, ArithmeticError, KeyError, TypeError, ValueError):
            value = None  # a baseline it cannot fit: no split, never a crash
        self._compared[run["id"]] = (now, run["status"], value)
        return value
