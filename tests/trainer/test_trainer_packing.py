"""--pack: a packed row computes what its examples compute alone, and fills the rows.

Tolerances (tolerances.py): the packed row runs the same products as its examples alone,
summed over more positions (the other examples' and the padding's, each weighted 0 by the
mask), so each sum may be taken in another order: the loss within gamma(its forward's
terms) of its size, each gradient within gamma(path) of its tensor's scale.
"""

from __future__ import annotations

import pytest
import torch
from tolerances import gamma, tiny_path

from trainer import models
from trainer.backends import kinds
from trainer.data import batches, packing
from trainer.engine.layer_engine import LayerEngine
from trainer.engine.plain import PlainLoop

SEQ, VOCAB = 48, 128
LENGTHS, PROMPTS = (9, 14, 5, 11), (3, 6, 0, 4)  # an example with no prompt (text) too


def examples(lengths=LENGTHS, prompts=PROMPTS, seq_len=SEQ) -> batches.Encoded:
    """Encoded examples of random tokens, the loss after each one's prompt."""
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(1, VOCAB, (sum(lengths),), generator=gen, dtype=torch.int32)
    trained = torch.cat([torch.arange(n) >= p for n, p in zip(lengths, prompts)])
    starts = torch.tensor([0, *lengths]).cumsum(0)
    return batches.Encoded(tokens, starts, trained, seq_len, pad_id=0)


def engine(cards: str = "cpu,cpu", resident: int = 1) -> LayerEngine:
    model = models.build(models.resolve("tiny-llama"), VOCAB, seed=0)
    return LayerEngine(model, kinds.parse(cards), resident, 1e-3, 0.01, 1.0)


def gradients(e: LayerEngine, micro: list[batches.MicroBatch]) -> tuple[float, dict]:
    loss = e.step(micro, 1e-3, update=False).loss
    return loss, {name: p.grad.detach().clone() for name, p, _ in e.trainable}


def alone(rows: batches.Encoded) -> list[batches.MicroBatch]:
    return [rows.micro_batch(torch.tensor([i])) for i in range(len(rows))]


def assert_same_step(got: tuple[float, dict], want: tuple[float, dict], label_tokens: int):
    path = tiny_path(SEQ, SEQ)
    (loss, grads), (loss_alone, grads_alone) = got, want
    assert abs(loss - loss_alone) <= gamma(label_tokens + VOCAB) * abs(loss_alone)
    for name, g in grads_alone.items():
        scale = float(g.abs().max())
        torch.testing.assert_close(grads[name], g, rtol=gamma(path), atol=gamma(path) * scale,
                                   msg=name)


def test_a_packed_row_gives_the_loss_and_gradients_of_its_examples_run_alone():
    rows = examples()
    packed = packing.pack(rows)
    assert len(packed) == 1  # all four in one row of 48 (39 tokens, 9 of padding)
    (row,) = [packed.micro_batch(torch.tensor([0]))]
    assert row.label_tokens == sum(mb.label_tokens for mb in alone(rows))
    assert_same_step(gradients(engine(), [row]), gradients(engine(), alone(rows)),
                     row.label_tokens)


def test_without_its_mask_a_packed_row_would_not_match():
    # The comparison above is tight enough to see attention cross from one example to
    # the next: the same row with the positions restarting but one segment is off.
    rows = examples()
    row = packing.pack(rows).micro_batch(torch.tensor([0]))
    crossing = batches.MicroBatch(row.input_ids, row.attention_mask, row.labels,
                                  position_ids=row.position_ids,
                                  segments=(row.segments > 0).long(), real_tokens=row.tokens)
    with pytest.raises(AssertionError):
        assert_same_step(gradients(engine(), [crossing]), gradients(engine(), alone(rows)),
                         row.label_tokens)


def test_the_plain_loop_takes_a_packed_row_as_the_engine_does():
    rows = examples()
    row = packing.pack(rows).micro_batch(torch.tensor([0]))
    loop = PlainLoop(models.build(models.resolve("tiny-llama"), VOCAB, seed=0),
                     torch.device("cpu"), 1e-3, 0.01, 1.0)
    loss, _ = loop.step([row], 1e-3)
    want = engine().step(alone(rows), 1e-3, update=False).loss
    assert abs(loss - want) <= gamma(row.label_tokens + VOCAB) * abs(want)


def test_positions_restart_at_each_example_and_its_first_token_carries_no_loss():
    rows = examples()
    row = packing.pack(rows).micro_batch(torch.tensor([0]))
    at = 0
    for k, m in enumerate(packing.pack(rows).members.tolist(), 1):
        n = LENGTHS[m]
        assert row.position_ids[0, at: at + n].tolist() == list(range(n))
        assert (row.segments[0, at: at + n] == k).all()
        assert row.labels[0, at] == -100
        at += n
    assert (row.segments[0, at:] == 0).all() and (row.labels[0, at:] == -100).all()
    assert row.tokens == sum(LENGTHS) and row.positions == SEQ


def test_the_engine_gives_the_layers_the_restarted_positions():
    # With rotary embeddings a block-diagonal mask alone makes the positions' offset cancel
    # (attention sees only differences of positions), so the loss cannot tell: look.
    row = packing.pack(examples()).micro_batch(torch.tensor([0]))
    e = engine()
    seen = []
    for c, rotary in enumerate(e.rotary):
        def record(x, position_ids, rotary=rotary):
            seen.append(position_ids.clone())
            return rotary(x, position_ids=position_ids)
        e.rotary[c] = record
    e.step([row], 1e-3, update=False)
    assert seen and all(torch.equal(p, row.position_ids) for p in seen)


def test_best_fit_leaves_no_row_that_another_rows_example_would_fit():
    lengths = [30, 20, 17, 13, 9, 9, 8, 5, 3, 2]
    packed = packing.pack(examples(lengths, [0] * len(lengths), seq_len=32))
    rows = [packed.members[packed.bounds[r]: packed.bounds[r + 1]].tolist()
            for r in range(len(packed))]
    assert sorted(m for row in rows for m in row) == list(range(len(lengths)))
    used = [sum(lengths[m] for m in row) for row in rows]
    assert max(used) <= 32 and len(rows) == -(-sum(lengths) // 32)  # as few rows as can be


def test_packing_the_nsmc_sample_at_512_needs_a_quarter_of_the_rows_or_fewer(nsmc_path, tmp_path):
    from trainer.data import tokenizer

    source = batches.open_source(f"nsmc:{nsmc_path}")
    texts = source.texts()
    tok = tokenizer.trained(texts, batches.tokenizer_vocab(texts), tmp_path)
    rows = batches.encode_examples(source.examples, tok, 512)
    packed = packing.pack(rows)
    assert len(rows) >= 4 * len(packed)
    # The real tokens a row carries: what a step trains on, at the same step time.
    assert packed.real_tokens == rows.real_tokens
    assert packed.real_tokens / (len(packed) * 512) >= 4 * rows.real_tokens / (len(rows) * 512)


@pytest.mark.slow
def test_a_packed_run_killed_twice_trains_bit_for_bit_as_one_run(tmp_path):
    # The rows are packed the same way each time (best fit is deterministic), and the
    # process that goes on reads the rows from the cache the first one wrote.
    from chat_models import write_jsonl
    from test_trainer_resume import RUN, killed_at_random, reference_losses

    data = write_jsonl(tmp_path / "d.jsonl", [
        {"prompt": "tell me a story about a cat " * (n % 4 + 1), "response": f"fine {n}"}
        for n in range(80)])
    cfg = {**RUN, "baseline": False, "data": str(data), "pack": True, "seq_len": 64,
           "steps": 10, "cache_dir": str(tmp_path / "cache")}
    expected = reference_losses(**cfg)
    got, outputs = killed_at_random({**cfg, "out": str(tmp_path / "out"), "checkpoint_every": 2},
                                    tmp_path, kills=2, seed=1)
    assert got == expected
    assert any('"resume"' in text for text in outputs)
