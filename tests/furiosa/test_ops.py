"""The op report of one training step, from furiosa-torch's own tracing (no card needed)."""

from __future__ import annotations

import pytest
import torch

from trainer.backends import furiosa_torch, op_report

# furiosa-torch compiles each op's PE code with the aarch64 cross compiler (.ci/run installs
# it; a host without it gets traced-only reports, and these tests cannot run there).
needs_cross_compiler = pytest.mark.skipif(op_report.why_not_probed() is not None,
                                          reason=str(op_report.why_not_probed()))


@pytest.fixture(scope="module")
def tiny_llama():
    return {g.name: g for g in op_report.step_graphs("tiny-llama", seq_len=16, probe=False)}


def rows(graph, part):
    return {r.op: r for r in graph.rows if r.part == part}


def test_the_step_has_five_graphs_with_forward_backward_and_optimizer_ops(tiny_llama):
    assert list(tiny_llama) == ["rotary cos/sin (once per micro-batch and card)", "embedding",
                                "decoder layer (every layer)", "norm, head and loss",
                                "AdamW step (a card's resident layers)"]
    layer = tiny_llama["decoder layer (every layer)"]
    assert rows(layer, "forward")["aten::mm"].count == 7  # q, k, v, o, gate, up, down
    adamw = rows(tiny_llama["AdamW step (a card's resident layers)"], "optimizer")
    assert {"aten::addcdiv_", "aten::lerp_.Scalar", "aten::sqrt"} <= set(adamw)
    # torch keeps AdamW's step count on the host: its item() never runs on the card
    assert adamw["aten::item"].status == "HOST"


def test_the_card_step_has_none_of_the_ops_2026_4_cannot_differentiate(tiny_llama):
    # The furiosa backend's modules (trainer/backends/furiosa_modules.py): no linear, no softmax
    # with dtype, no embedding or nll_loss backward; every op that needs a gradient is one the
    # package differentiates itself (or a view).
    ops_seen = {r.op for g in tiny_llama.values() for r in g.rows}
    assert not ops_seen & {"aten::linear", "aten::embedding", "aten::cross_entropy_loss",
                           "aten::nll_loss_nd", "aten::nll_loss_backward",
                           "aten::embedding_backward"}
    for graph in tiny_llama.values():
        for r in graph.rows:
            # the only backward ops are MmLinear's own (plain mm and its transposed view) and
            # the loss's own (softmax against the one-hot rows of a chunk of tokens)
            if r.part == "backward":
                assert (r.op, r.of) in {("aten::mm", "MmLinear's own backward"),
                                        ("aten::t", "MmLinear's own backward")} or \
                    r.of == "the loss's own backward", r
            assert r.grad in ("", "furiosa", "explicit", "view", "torch formula"), r
            if r.grad == "torch formula":  # only casts that are identities in fp32
                assert r.op.startswith("aten::to."), (graph.name, r.op)
    layer = tiny_llama["decoder layer (every layer)"]
    assert rows(layer, "backward")["aten::mm"].count == 14  # x and weight gradients of 7


def test_gradients_are_the_packages_own_where_it_registers_them_else_torchs(tiny_llama):
    assert "aten::matmul" in op_report.differentiated_by_package()
    layer = tiny_llama["decoder layer (every layer)"]
    forward = rows(layer, "forward")
    assert forward["aten::matmul"].grad == "furiosa"  # the attention's products
    # the linears' mm runs inside MmLinear's autograd Function: its gradient is the
    # Function's own backward (plain mm), not the package's build of mm
    assert forward["aten::mm"].grad == "explicit"
    assert forward["aten::softmax.int"].grad == "furiosa"
    assert forward["aten::silu"].grad == "furiosa"
    assert forward["aten::reshape"].grad == "view"
    embed = tiny_llama["embedding"]
    assert rows(embed, "forward")["aten::index_select"].grad == "furiosa"
    head = rows(tiny_llama["norm, head and loss"], "forward")
    # the loss runs inside its own autograd Function, a chunk of tokens at a time: its
    # gradient is the Function's backward, plain ops at the chunk's shapes
    assert head["aten::log_softmax.int"].grad == "explicit"
    assert head["aten::sum"].grad == "explicit"  # of log-probabilities times one-hot rows
    backward = rows(tiny_llama["norm, head and loss"], "backward")
    assert backward["aten::softmax.int"].of == "the loss's own backward"
    assert {"aten::eq.Tensor", "aten::ge.Scalar", "aten::copy_"} <= set(backward)


def test_ops_without_a_gradient_flowing_into_them_get_none(tiny_llama):
    rotary = tiny_llama["rotary cos/sin (once per micro-batch and card)"]
    assert all(r.grad == "" and r.part == "forward" for r in rotary.rows)
    # the labels' shift (an int tensor) needs no gradient, the hidden state's norm does
    head = rows(tiny_llama["norm, head and loss"], "forward")
    assert head["aten::eq.Tensor"].grad == "" and head["aten::rsqrt"].grad == "furiosa"
    assert head["aten::arange"].grad == ""
    # the labels' shift (pad, which 2026.4 cannot compile for ints) runs on the host
    assert "aten::pad" not in head


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
    assert "| `aten::mm` | forward | 7 | SKIP | explicit |" in done.stdout


@needs_cross_compiler
def test_a_probed_op_compiles_for_a_card_and_the_verdict_names_what_cannot():
    furiosa_torch.fuse_cards()  # as the trainer compiles: for a whole card
    table = torch.nn.Embedding(32, 16)

    def forward(x, ids):
        with torch.enable_grad():
            return torch.nn.functional.silu(x.requires_grad_(True)) + table(ids)

    graph = op_report.trace_graph("silu and embedding", forward,
                                  (torch.randn(8, 16), torch.randint(0, 32, (8,))), True,
                                  op_report.differentiated_by_package(), op_report.new_caches())
    silu = rows(graph, "forward")["aten::silu"]
    assert (silu.status, silu.grad, silu.grad_status) == ("OK", "furiosa", "OK")
    # furiosa-torch 2026.4.0 cannot compile torch's embedding gradient (so the card runs the
    # embedding as index_select)
    backward = rows(graph, "backward")["aten::embedding_backward"]
    assert backward.status == "FAIL" and backward.why.startswith("UnsupportedOpError")
    assert graph.failing() == [backward]



def test_the_lora_step_runs_the_adapters_products_as_mm_with_their_own_backward():
    graphs = {g.name: g
              for g in op_report.step_graphs("tiny-llama", seq_len=16, probe=False, lora=4)}
    layer = graphs["decoder layer (every layer)"]
    forward = rows(layer, "forward")
    # the attention's two products stay matmul; the adapters' two products per projection
    # are mm beside the frozen base's: 7 + 2 x 7
    assert forward["aten::matmul"].count == 2
    assert forward["aten::mm"].count == 21 and forward["aten::mm"].grad == "explicit"
    backward = rows(layer, "backward")["aten::mm"]
    assert backward.of == "MmLinear's own backward, the LoRA products' own backward"
    # the frozen bases need only their input's gradient (7); the adapters both (2 x 2 x 7)
    assert backward.count == 7 + 28


def test_check_lora_is_for_the_op_report_only(python_in):
    done = python_in("-m", "trainer", "check", "--backend", "cpu", "--lora", "4")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        "--lora is for the op report: give --backend furiosa:N --ops")


@needs_cross_compiler
def test_every_op_of_the_chunked_loss_and_its_own_backward_compiles_for_a_card():
    # The loss a chunk of tokens at a time (two chunks of 4 here: each op and shape compiles
    # once), its backward written out: each op, forward and backward, compiles with the
    # trainer's settings.
    from trainer.backends import furiosa_modules

    furiosa_torch.fuse_cards()
    furiosa_torch.configure_compiler()
    logits = torch.randn(8, 16)
    target = torch.tensor([3.0, -1, 0, 15, 7, 7, -1, 2])  # fp32 ids, as host_targets gives

    def loss(x):
        with torch.enable_grad():
            return furiosa_modules.loss_from_targets(x.requires_grad_(True), target, 16, 8,
                                                     chunk_rows=4)

    def backward(x, target, scale):
        return furiosa_modules.chunked_loss_backward(x, target, scale, 4)

    graph = op_report.trace_graph("loss", loss, (logits,), True,
                                  op_report.differentiated_by_package(), op_report.new_caches(),
                                  explicit=(("the loss's own backward", backward,
                                             (logits, target, torch.tensor(0.125))),))
    assert rows(graph, "forward")["aten::log_softmax.int"].grad == "explicit"
    assert {"aten::softmax.int", "aten::copy_", "aten::sub.Tensor"} <= set(
        rows(graph, "backward"))
    assert graph.failing() == [], graph.failing()
