"""The op report of one training step, from furiosa-torch's own tracing (no card needed)."""

from __future__ import annotations

import pytest

from trainer import ops


@pytest.fixture(scope="module")
def tiny_llama():
    return {g.name: g for g in ops.step_graphs("tiny-llama", seq_len=16, probe=False)}


def rows(graph, part):
    return {r.op: r for r in graph.rows if r.part == part}


def test_the_step_has_four_graphs_with_forward_backward_and_optimizer_ops(tiny_llama):
    assert list(tiny_llama) == ["rotary cos/sin (once per micro-batch and card)", "embedding",
                                "decoder layer (every layer)", "norm, head and loss",
                                "AdamW step (a card's resident layers)"]
    layer = tiny_llama["decoder layer (every layer)"]
    assert rows(layer, "forward")["aten::linear"].count == 7  # q, k, v, o, gate, up, down
    assert "aten::mm" in rows(layer, "backward")  # torch's formula for the linear's grads
    adamw = rows(tiny_llama["AdamW step (a card's resident layers)"], "optimizer")
    assert {"aten::addcdiv_", "aten::lerp_.Scalar", "aten::sqrt"} <= set(adamw)


def test_gradients_are_the_packages_own_where_it_registers_them_else_torchs(tiny_llama):
    layer = rows(tiny_llama["decoder layer (every layer)"], "forward")
    assert layer["aten::linear"].grad == "furiosa"
    assert layer["aten::silu"].grad == "furiosa"
    assert layer["aten::reshape"].grad == "view"
    embed = tiny_llama["embedding"]
    assert rows(embed, "forward")["aten::embedding"].grad == "torch formula"
    assert "aten::embedding_backward" in rows(embed, "backward")
    assert "aten::linear" in ops.differentiated_by_package()


def test_check_without_a_card_gives_the_op_report_instead(python_in):
    done = python_in("-m", "trainer", "check", "--backend", "furiosa:0", "--trace-only",
                     "--seq-len", "16")
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]
    assert first.startswith("backend furiosa:0: no RNGD card or driver")
    assert first.endswith("no card to compare, so the op report instead")
    assert second.startswith("Op report: one training step of tiny-llama on furiosa-torch")
    assert "| `aten::linear` | forward | 7 | SKIP | furiosa |" in done.stdout
