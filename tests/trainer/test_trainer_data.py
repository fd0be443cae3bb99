"""Data formats, the offline tokenizer, and real learning on the NSMC sample."""

from __future__ import annotations

import json

import pytest

from trainer.data import batches, tokenizer
from trainer.errors import UsageError


@pytest.fixture
def tok(tmp_path):
    texts = [e.prompt + e.answer for e in batches.read_nsmc_lines(
        ["1\t영화 정말 재미있어요\t1", "2\t최악의 영화\t0"] * 20)]
    return tokenizer.trained(texts, 300, tmp_path)


def test_nsmc_rows_become_korean_prompt_and_answer(nsmc_path):
    examples = batches.read_nsmc(nsmc_path)
    assert len(examples) > 4900
    assert all(e.answer in (" 긍정", " 부정") for e in examples)
    assert "리뷰:" in examples[0].prompt


def test_loss_is_taken_on_the_answer_tokens_only(tok):
    ex = [batches.Example("다음 영화 리뷰의 감정은?\n리뷰: 좋아요\n감정:", " 긍정")]
    ids, labels = batches.encode(ex, tok, 48)
    answer = tok(" 긍정", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    taken = labels[0][labels[0] != -100].tolist()
    assert taken == answer
    # The labelled tokens are the last real tokens of the row, right after the prompt.
    real = int((ids[0] != tok.pad_token_id).sum())
    assert ids[0, real - len(answer): real].tolist() == answer


def test_a_long_prompt_is_cut_from_the_left_and_the_answer_kept(tok):
    ex = [batches.Example("영화 " * 200, " 부정")]
    ids, labels = batches.encode(ex, tok, 16)
    assert ids.shape == (1, 16)
    assert (labels[0] != -100).sum() == len(tok(" 부정", add_special_tokens=False)["input_ids"]) + 1


def test_jsonl_with_prompt_response_and_with_text(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "질문", "response": "답"}) + "\n\n"
                    + json.dumps({"text": "그냥 글"}, ensure_ascii=False) + "\n", encoding="utf-8")
    src = batches.open_source(str(path))
    assert src.kind == "jsonl"
    assert src.examples == [batches.Example("질문", "답"), batches.Example("", "그냥 글")]
    assert batches.open_source(f"jsonl:{path}").examples == src.examples


def test_jsonl_without_the_fields_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "x"}\n')
    with pytest.raises(UsageError, match="bad.jsonl:1"):
        batches.open_source(str(path))


def test_unknown_data_is_refused():
    with pytest.raises(UsageError, match="unknown data"):
        batches.open_source("csv:foo")


def test_the_trained_tokenizer_is_cached_and_reloaded_offline(tmp_path):
    texts = ["안녕하세요 영화 재미있다", "hello world"] * 50
    first = tokenizer.trained(texts, 300, tmp_path)
    cached = list((tmp_path / "tokenizers").iterdir())
    assert len(cached) == 1 and (cached[0] / "tokenizer.json").exists()
    again = tokenizer.trained(texts, 300, tmp_path)
    assert again("영화 재미있다")["input_ids"] == first("영화 재미있다")["input_ids"]
    assert again.decode(again("영화 재미있다")["input_ids"]) == "영화 재미있다"


def test_data_order_follows_the_seed():
    src = batches.open_source("synthetic")
    a = iter(batches.make_batches(src, None, 16, 2, 0, 128))
    b = iter(batches.make_batches(src, None, 16, 2, 0, 128))
    c = iter(batches.make_batches(src, None, 16, 2, 1, 128))
    first_a, first_b, first_c = next(a), next(b), next(c)
    assert (first_a.input_ids == first_b.input_ids).all()
    assert not (first_a.input_ids == first_c.input_ids).all()


@pytest.mark.slow
def test_loss_falls_on_the_nsmc_sample(nsmc_path, tmp_path, restore_signals):
    from trainer.config import TrainConfig
    from trainer.records import RecordWriter, Step
    from trainer.train import Recipe

    lines = []

    class Sink:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass

    cfg = TrainConfig(model="tiny-llama", resident_layers=1, backend="cpu,cpu", steps=60,
                      seq_len=64, accum=2, micro_batch=4, lr=3e-3, data=f"nsmc:{nsmc_path}",
                      seed=0, cache_dir=str(tmp_path))
    recipe = Recipe(cfg, RecordWriter(Sink()))
    recipe.setup()
    (summary,) = recipe.run()
    losses = summary.losses
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10, losses
    from trainer.records import parse_line
    assert sum(isinstance(parse_line(s), Step) for s in lines) == 60
