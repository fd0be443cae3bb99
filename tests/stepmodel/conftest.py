"""Fixtures of the step-model tests; ``store`` and ``rngdctl`` come from tests/conftest.py."""

from __future__ import annotations

import pytest

from trainer import records


@pytest.fixture
def recorded_run(store):
    """Stores a run from step records the way ingest does; returns its id."""
    from daemon.run.ingest import Ingest

    def add(*passes: list, config: dict | None = None, main_config: dict | None = None,
            baseline_config: dict | None = None) -> int:
        run_id = store.add_run(config or {"backend": "cpu", "cards": 1})
        lines = []
        for steps in passes:
            label = steps[0].config_label
            last = steps[-1].extra
            lines.append(records.dumps(records.Start(
                config_label=label, time=900.0 + len(lines),
                config={"backend": "cpu", "cards": last["cards"], "layers": last["layers"],
                        "resident_layers": last["resident_per_card"], "seq_len": last["seq_len"],
                        "accum": last["accum"], "micro_batch": 1, "vocab_size": 128256,
                        "hidden_size": 4096, "tied_head": False,
                        "params_per_layer": last["params_per_layer"],
                        **(main_config or {} if label == records.MAIN else {}),
                        **(baseline_config or {} if label == records.BASELINE else {})})))
            lines += [records.dumps(s) for s in steps]
        Ingest(store).feed(run_id, lines)
        return run_id

    return add
