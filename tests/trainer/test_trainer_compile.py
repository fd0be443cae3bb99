"""The compiled-graph path, on a CPU card that compiles its graphs (``cpu-compiled``)."""

from __future__ import annotations

import pytest
from test_trainer_numerics import PATH, assert_same, engine_losses_on, plain_losses

from trainer.backends.compile import run_compile
from trainer.records import End, Event, RecordWriter, parse_line

pytestmark = pytest.mark.slow


class Lines:
    def __init__(self):
        self.lines = []

    def write(self, s):
        self.lines.append(s)

    def flush(self):
        pass


def test_compile_records_each_graph_and_how_long_it_took():
    sink = Lines()
    assert run_compile("cpu-compiled", "tiny-llama", 32, 1, RecordWriter(sink)) == 0
    recs = [parse_line(s) for s in sink.lines]
    graphs = {r.data["graph"]: r.data["seconds"] for r in recs if isinstance(r, Event)}
    assert set(graphs) == {"decoder layer forward (llama)", "norm+head forward", "step"}
    assert all(seconds > 0 for seconds in graphs.values())
    assert isinstance(recs[-1], End) and recs[-1].status == "ok"


def test_compiled_graphs_give_the_plain_loop_losses(synthetic_steps):
    ref, _ = plain_losses(synthetic_steps[:3])
    got = engine_losses_on("cpu-compiled,cpu-compiled", synthetic_steps[:3], resident=1)
    # Compiled graphs fuse and reorder the forward's sums too: every sum on the path may differ.
    assert_same(got, ref, ref.tolerances(forward_terms=PATH))
