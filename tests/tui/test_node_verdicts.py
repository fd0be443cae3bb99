"""With node agents the gates panel gives each node's verdict, as `show` does."""

from __future__ import annotations

from textual.geometry import Region
from tui_support import NOW


def text_of(node, selector: str) -> str:
    widget = node.query_one(selector)
    lines = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join(line.text.strip() for line in lines).strip("\n")


NODE_LINES = ["rngd-node-1: run 3 is running on rngd-node-1",
              "rngd-node-2: pid 4121 python bench.py (kim) holds npu1 (orphan: in no pod)",
              "rngd-node-3: agent on rngd-node-3 silent since 13:50"]


def _agents_check(store, run_id):
    gates = [
        {"name": "agent", "reading": 2.0, "threshold": "<= 3 ticks", "verdict": "pass",
         "detail": "agent on rngd-node-1 published 2 s ago"},
        {"name": "host_load", "reading": 3.2, "threshold": "< 150", "verdict": "pass",
         "detail": "rngd-node-1: load 3.2 / 2.50 / 2.00"},
        {"name": "one_at_a_time", "reading": 1, "threshold": "0 active", "verdict": "fail",
         "detail": "run 3 is running on rngd-node-1"},
        {"name": "nodes", "reading": "rngd-node-1", "threshold": "0 of 3 would launch",
         "verdict": "n/a", "detail": "\n".join(NODE_LINES)},
    ]
    store.add_gate_check(run_id, gates, False, now=NOW - 1)


async def test_the_gates_panel_names_the_closest_node_and_lists_every_nodes_verdict(
        make_app, settle, store, ids):
    _agents_check(store, ids["next"])
    async with make_app().run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        blocked = " ".join(text_of(pilot.app, "#gates-blocked").split())
        nodes = text_of(pilot.app, "#gates-nodes").splitlines()
    assert "closest node rngd-node-1: run 3 is running on rngd-node-1" in blocked
    # One line a node (cut to the panel's width), the run's node marked.
    assert len(nodes) == 3
    assert nodes[0].strip() == "◀ ✗ " + NODE_LINES[0]
    for line, expected in zip(nodes[1:], NODE_LINES[1:]):
        assert line.strip().startswith("✗ " + expected[:30])


async def test_without_node_agents_there_is_no_node_list(make_app, settle):
    async with make_app().run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        assert pilot.app.query_one("#gates-nodes").display is False
