"""The op report of one training step, from furiosa-torch's own tracing (no card needed)."""

from __future__ import annotations

import pytest
import torch

from trainer import furiosa_torch, ops

# furiosa-torch compiles each op's PE code with the aarch64 cross compiler (.ci/run installs
# it; a host without it gets traced-only reports, and these tests cannot run there).
needs_cross_compiler = pytest.mark.skipif(ops.why_not_probed() is not None,
                                          reason=str(ops.why_not_probed()))


@pytest.fixture(scope="module")
def tiny_llama():
    return {g.name: g for g in ops.step_graphs("tiny-llama", seq_len=16, probe=False)}


def rows(graph, part):
    return {r.op: r for r in graph.rows if r.part == part}


def test_the_step_has_five_graphs_with_forward_backward_and_optimizer_ops(tiny_llama):
    assert list(tiny_llama) == ["rotary cos/sin (once per micro-batch and card)", "embedding",
                                "decoder layer (every layer)", "norm, head and loss",
                                "AdamW step (a card's resident layers)"]
    layer = tiny_llama["decoder layer (every layer)"]
    assert rows(layer, "forward")["aten::linear"].count == 7  # q, k, v, o, gate, up, down
    adamw = rows(tiny_llama["AdamW step (a card's resident layers)"], "optimizer")
    assert {"aten::addcdiv_", "aten::lerp_.Scalar", "aten::sqrt"} <= set(adamw)


def test_gradients_are_the_packages_own_where_it_registers_them_else_torchs(tiny_llama):
    assert "aten::linear" in ops.differentiated_by_package()
    layer = tiny_llama["decoder layer (every layer)"]
    forward = rows(layer, "forward")
    assert forward["aten::linear"].grad == "furiosa"
    assert forward["aten::silu"].grad == "furiosa"
    assert forward["aten::reshape"].grad == "view"
    # The package builds the linear's backward itself: torch's formula (mm) never runs there.
    assert "aten::mm" not in rows(layer, "backward")
    # The card runs the embedding as index_select (FuriosaBackend.embedding), which the
    # package differentiates: no backward op of torch's is left to run there.
    embed = tiny_llama["embedding"]
    assert rows(embed, "forward")["aten::index_select"].grad == "furiosa"
    assert rows(embed, "backward") == {}
    head = tiny_llama["norm, head and loss"]
    assert rows(head, "forward")["aten::cross_entropy_loss"].grad == "torch formula"
    assert rows(head, "backward")["aten::nll_loss_backward"].of == "aten::cross_entropy_loss"


def test_ops_without_a_gradient_flowing_into_them_get_none(tiny_llama):
    rotary = tiny_llama["rotary cos/sin (once per micro-batch and card)"]
    assert all(r.grad == "" and r.part == "forward" for r in rotary.rows)
    # the labels' shift (an int tensor) needs no gradient, the hidden state's norm does
    head = rows(tiny_llama["norm, head and loss"], "forward")
    assert head["aten::pad"].grad == "" and head["aten::rsqrt"].grad == "furiosa"


@pytest.mark.parametrize("spec", ["furiosa:0", "furiosa:auto"])
def test_check_without_a_card_gives_the_op_report_instead(python_in, spec):
    done = python_in("-m", "trainer", "check", "--backend", spec, "--trace-only",
                     "--seq-len", "16")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    first, second = done.stdout.splitlines()[:2]
    assert first.startswith(f"backend {spec}: no RNGD card or driver")
    assert "librenegade.so" in first
    assert first.endswith("no card to compare, so the op report instead")
    assert second.startswith("Op report: one training step of tiny-llama on furiosa-torch")
    assert "| `aten::linear` | forward | 7 | SKIP | furiosa |" in done.stdout


@needs_cross_compiler
def test_a_probed_op_compiles_for_a_card_and_the_verdict_names_what_cannot():
    furiosa_torch.fuse_cards()  # as the trainer compiles: for a whole card
    table = torch.nn.Embedding(32, 16)

    def forward(x, ids):
        with torch.enable_grad():
            return torch.nn.functional.silu(x.requires_grad_(True)) + table(ids)

    graph = ops.trace_graph("silu and embedding", forward,
                            (torch.randn(8, 16), torch.randint(0, 32, (8,))), True,
                            ops.differentiated_by_package(), {"package": {}, "formula": {}})
    silu = rows(graph, "forward")["aten::silu"]
    assert (silu.status, silu.grad, silu.grad_status) == ("OK", "furiosa", "OK")
    # furiosa-torch 2026.4.0 cannot compile torch's embedding gradient (so the card runs the
    # embedding as index_select)
    backward = rows(graph, "backward")["aten::embedding_backward"]
    assert backward.status == "FAIL" and backward.why.startswith("UnsupportedOpError")
    assert graph.failing() == [backward]
