"""The furiosa backend's modules and loss (trainer/backends/furiosa_modules.py) compute the
stock step.

A card runs the embedding as index_select, linears as mm, softmax without dtype and the loss
without nll_loss: the same arithmetic from ops furiosa-torch 2026.4 compiles and
differentiates. Here, on the CPU in fp32, they give transformers' loss and gradients. Runs in
.venv (torch 2.13) and in the furiosa environment (torch 2.10, `make test-furiosa`).

Tolerances (tolerances.py): the two ways compute the same products and sums, some in another
order or with one more rounding (mm then add against addmm; the loss's sum over the labelled
tokens against nll_loss's). A loss differs by at most gamma(tokens + vocab) relative, a
gradient by gamma(path), path being the sums from the loss back to the weight.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tolerances import gamma, tiny_path
from torch import nn

from trainer import models
from trainer.backends import furiosa_modules, kinds
from trainer.data import batches
from trainer.engine.layer_engine import LayerEngine

SEQ, VOCAB = 32, 128


def batch(seed: int = 0):
    ids, labels = batches.synthetic(SEQ, VOCAB, seed, count=2)
    labels = labels.clone()
    labels[0, :5] = -100  # unlabelled tokens (a prompt): ignored by both losses
    return ids, labels


def stock_and_card(model_name: str):
    stock = models.build(models.resolve(model_name), VOCAB, seed=0)
    return stock, furiosa_modules.for_card(copy.deepcopy(stock))


def both_backward(stock, card, ids, labels):
    """Both losses and their backward: the same loss within gamma(tokens + vocab), the same names."""
    items = int((labels[:, 1:] != -100).sum())
    ref = stock.loss_function(stock(input_ids=ids).logits, labels, VOCAB,
                              num_items_in_batch=items)
    ref.backward()
    got = furiosa_modules.causal_lm_loss(card(input_ids=ids).logits, labels, VOCAB,
                                         num_items_in_batch=items)
    got.backward()
    assert abs(got.item() - ref.item()) <= gamma(ids.numel() + VOCAB) * abs(ref.item())
    assert dict(card.named_parameters()).keys() == dict(stock.named_parameters()).keys()


@pytest.mark.parametrize("model_name", ["tiny-llama", "tiny-qwen2"])
def test_the_cards_modules_give_the_stock_loss_and_gradients(model_name):
    stock, card = stock_and_card(model_name)
    ids, labels = batch()
    both_backward(stock, card, ids, labels)  # the same parameter names: masters, checkpoints
    path = tiny_path(ids.numel(), SEQ)
    card_params = dict(card.named_parameters())
    for name, p in stock.named_parameters():
        scale = float(p.grad.abs().max())
        torch.testing.assert_close(card_params[name].grad, p.grad, rtol=0,
                                   atol=gamma(path) * scale, msg=name)


def test_the_loss_without_num_items_is_the_mean_over_labelled_tokens():
    logits = torch.randn(2, SEQ, VOCAB)
    _, labels = batch(1)
    ref = models.build(models.resolve("tiny-llama"), VOCAB, seed=0).loss_function(
        logits, labels, VOCAB)
    got = furiosa_modules.causal_lm_loss(logits, labels, VOCAB)
    assert abs(float(got) - float(ref)) <= gamma(2 * SEQ + VOCAB) * abs(float(ref))


@pytest.mark.parametrize("rows", [5, 64, 1000])  # uneven chunks, exactly one, fewer tokens
def test_the_loss_in_chunks_of_tokens_gives_the_stock_loss_and_logit_gradients(rows):
    torch.manual_seed(3)
    logits = torch.randn(2, SEQ, VOCAB, requires_grad=True)
    _, labels = batch(1)
    items = int((labels[:, 1:] != -100).sum())
    ref = models.build(models.resolve("tiny-llama"), VOCAB, seed=0).loss_function(
        logits, labels, VOCAB, num_items_in_batch=items)
    (ref_grad,) = torch.autograd.grad(ref * 0.5, logits)  # a scaled loss (accumulation)
    target, _ = furiosa_modules.host_targets(labels)
    got = furiosa_modules.loss_from_targets(logits, target, VOCAB, items, chunk_rows=rows)
    (grad,) = torch.autograd.grad(got * 0.5, logits)
    assert abs(got.item() - ref.item()) <= gamma(2 * SEQ + VOCAB) * abs(ref.item())
    # one logit's gradient: softmax - one_hot over the vocabulary, scaled: a sum of VOCAB terms
    torch.testing.assert_close(grad, ref_grad, rtol=0,
                               atol=gamma(VOCAB) * float(ref_grad.abs().max()))
    assert not grad[0, :4].any()  # tokens whose next token is unlabelled learn nothing


def test_the_loss_keeps_no_one_hot_or_log_probabilities_for_its_backward():
    # The card's memory: the old loss kept a logits-sized one-hot and a logits-sized table of
    # log-probabilities until the backward; the chunked loss keeps the logits (which the
    # engine holds anyway) and the targets, whatever the chunk size.
    logits = torch.randn(4, SEQ, VOCAB, requires_grad=True)
    _, labels = batch(2)
    target, items = furiosa_modules.host_targets(torch.cat([labels, labels]))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append(t.untyped_storage().nbytes()) or t, lambda t: t):
        loss = furiosa_modules.loss_from_targets(logits, target, VOCAB, items, chunk_rows=16)
    assert sum(saved) <= logits.numel() * 4 + target.numel() * 8
    loss.backward()
    assert logits.grad.shape == logits.shape and logits.grad.dtype == logits.dtype


def test_the_loss_compares_fp32_ids_and_sums_by_row_the_forms_2026_4_compiles_at_128k_words():
    # At Llama-3.1's vocabulary, furiosa-torch 2026.4.0 cannot compile a chunk's sum straight
    # to a scalar, nor eq of int64 targets against the word ids (bench/furiosa_loss_compile.py,
    # docs/design.md); by row, and in fp32, both compile. The graph the card runs has only those.
    from torch.fx.experimental.proxy_tensor import make_fx

    vocab = 128_256
    logits, target = torch.randn(8, vocab), torch.tensor([5, -1, 128_255, 0, 7, 7, 1, 2])
    rows = furiosa_modules.loss_chunk_rows(vocab)
    for fn in (lambda x, t: furiosa_modules.chunked_loss_sum(x, t, rows),
               lambda x, t: furiosa_modules.chunked_loss_backward(x, t, torch.tensor(0.5), rows)):
        graph = make_fx(fn)(logits, target).graph
        calls = [n for n in graph.nodes if n.op == "call_function"]
        eqs = [n for n in calls if n.target == torch.ops.aten.eq.Tensor]
        assert eqs and all(a.meta["val"].dtype == torch.float32 for n in eqs for a in n.args)
        for n in calls:
            if n.target == torch.ops.aten.sum.default:  # to a scalar: only of row sums
                assert n.args[0].meta["val"].dim() == 1, n
    expected = -sum(torch.log_softmax(logits[i], -1)[t] for i, t in enumerate(target) if t >= 0)
    got = furiosa_modules.chunked_loss_sum(logits, target, rows)
    assert abs(float(got) - float(expected)) <= gamma(8 + vocab) * abs(float(expected))


def test_a_vocabulary_past_what_fp32_ids_hold_exactly_is_refused_in_one_line():
    from trainer.errors import UsageError

    with pytest.raises(UsageError, match=r"exact up to 16,777,216 words; this vocabulary "
                                         r"has 16,777,217"):
        furiosa_modules.loss_from_targets(torch.zeros(1, 4), torch.zeros(1), 2**24 + 1, 1)


def test_the_default_chunk_is_about_64_mb_of_fp32_at_llama_3_1s_vocabulary():
    rows = furiosa_modules.loss_chunk_rows(128_256)
    assert rows == 130 and rows * 128_256 * 4 <= 64 * 2**20
    assert furiosa_modules.loss_chunk_rows(2**30) == 1  # never an empty chunk


def test_lora_adapters_products_run_as_mm_with_the_stock_loss_and_gradients():
    # The adapters' products (x A^T B^T) as mm with their gradient written out, not matmul,
    # whose gradient build on the card is the package's linear one (the op report).
    stock = models.build(models.resolve("tiny-llama"), VOCAB, seed=0)
    models.add_lora(stock, 4)
    with torch.no_grad():  # B starts at zero: give A's gradient something to carry
        for m in stock.modules():
            if isinstance(m, models.LoRALinear):
                m.lora_b.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(1))
    card = furiosa_modules.for_card(copy.deepcopy(stock))
    assert isinstance(card.model.layers[0].mlp.down_proj, furiosa_modules.MmLoRALinear)
    assert isinstance(card.model.layers[0].mlp.down_proj.base, furiosa_modules.MmLinear)
    assert not any(isinstance(m, models.LoRALinear) for m in card.modules())
    ids, labels = batch(4)
    both_backward(stock, card, ids, labels)
    card_params = dict(card.named_parameters())
    trained = [(n, p) for n, p in stock.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n, _ in trained)
    path = tiny_path(ids.numel(), SEQ)
    for name, p in trained:
        torch.testing.assert_close(card_params[name].grad, p.grad, rtol=0,
                                   atol=gamma(path) * float(p.grad.abs().max()), msg=name)


def test_the_card_model_has_no_linear_or_embedding_and_its_own_attention_config():
    stock, card = stock_and_card("tiny-qwen2")  # tied head: one weight for both swaps
    assert not any(type(m) in (nn.Linear, nn.Embedding) for m in card.modules())
    assert card.lm_head.weight is card.model.embed_tokens.weight
    attn = card.model.layers[0].self_attn
    assert attn.config._attn_implementation == furiosa_modules.ATTENTION
    assert attn.config is not card.config  # the model's own (its masks) stays eager
    assert card.config._attn_implementation == "eager"
    assert stock.model.layers[0].self_attn.config._attn_implementation == "eager"


def test_the_cards_embedding_is_index_select_with_nn_embeddings_rows_and_gradients():
    # The card runs the embedding as index_select (2026.4.0 cannot compile torch's
    # embedding_backward, tests/furiosa); on the CPU both give the same rows and gradients.
    torch.manual_seed(0)
    ids = torch.tensor([[3, 1, 3, 7], [0, 31, 3, 2]])  # row 3 three times: gradients add up
    seed = torch.randn(2, 4, 8)
    for padding_idx in (None, 3):
        embed = torch.nn.Embedding(32, 8, padding_idx=padding_idx)
        card = furiosa_modules.IndexSelectEmbedding(embed)
        assert card.weight is embed.weight  # one parameter: the masters and a tied head see it
        ref = embed(ids)
        (ref_grad,) = torch.autograd.grad(ref, embed.weight, seed)
        out = card(ids)
        (grad,) = torch.autograd.grad(out, card.weight, seed)
        assert torch.equal(out, ref)
        # a row's gradient sums up to 3 seeds: at most 2 roundings of a sum below 3 max|seed|
        eps = torch.finfo(torch.float32).eps
        torch.testing.assert_close(grad, ref_grad, rtol=0, atol=3 * float(seed.abs().max()) * eps)
        if padding_idx is not None:
            assert not grad[padding_idx].any()  # nn.Embedding's padding row learns nothing


class FuriosaModulesOnCpu(kinds.FuriosaBackend):
    """The furiosa backend's pieces and loss, run by the host: no card to wait for."""

    def synchronize(self) -> None:
        pass


def test_only_the_furiosa_backend_swaps_and_its_step_matches_the_cpu_step():
    ids, labels = batch(2)
    mb = batches.MicroBatch(ids, torch.ones_like(ids), labels)
    results = {}
    for name, backend in (("cpu", kinds.parse("cpu")[0]),
                          ("card", FuriosaModulesOnCpu("furiosa:0", torch.device("cpu"),
                                                       fused_adamw=False))):
        model = models.build(models.resolve("tiny-llama"), VOCAB, seed=0)
        # layer 0 resident (swapped in place), layers 1-3 offloaded (swapped copies)
        engine = LayerEngine(model, [backend], 1, lr=1e-3, weight_decay=0.0, max_grad_norm=0.0)
        loss = engine.step([mb], lr=0.0, update=False).loss
        results[name] = engine, loss
    cpu, card = results["cpu"][0], results["card"][0]
    for s in cpu.slots:
        assert type(s.module.self_attn.q_proj) is nn.Linear
    for s in card.slots:
        assert isinstance(s.module.mlp.down_proj, furiosa_modules.MmLinear)
    assert type(cpu.embed) is nn.Embedding
    assert isinstance(card.embed, furiosa_modules.IndexSelectEmbedding)

    tokens = ids.numel()
    ref_loss = results["cpu"][1]
    assert abs(results["card"][1] - ref_loss) <= gamma(tokens + VOCAB) * abs(ref_loss)
    path = tiny_path(tokens, SEQ)
    pairs = list(zip(card.layer_grads(), cpu.layer_grads()))
    pairs += [(card.embed.weight.grad, cpu.embed.weight.grad),
              (card.head.weight.grad, cpu.head.weight.grad)]
    for got, ref in pairs:
        torch.testing.assert_close(got, ref, rtol=0,
                                   atol=gamma(path) * float(ref.abs().max()))
