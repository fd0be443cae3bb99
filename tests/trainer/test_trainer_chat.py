"""Chat data: the model's own template, the loss on the assistant's turns, the forms
recognised, what a chat too long for --seq-len becomes, and the cache of encoded data."""

from __future__ import annotations

import pytest
import torch
from chat_models import LLAMA3_TEMPLATE, chat_model_folder, llama3_tokenizer, write_jsonl

from trainer import records
from trainer.data import batches, cache, chat, formats
from trainer.data.formats import Conversation
from trainer.errors import UsageError

CHAT = Conversation((
    ("system", "Be brief."),
    ("user", "hello there"),
    ("assistant", "I am fine thanks"),
    ("user", "what is the weather today"),
    ("assistant", "the answer is forty two"),
))


@pytest.fixture(scope="module")
def tok():
    return llama3_tokenizer()


def assistant_tokens(ids: list[int], tok) -> list[int]:
    """The oracle, read from the token ids alone: 1 for each token of an assistant turn's
    content and its <|eot_id|>; the header (<|start_header_id|>assistant<|end_header_id|>)
    and the blank line after it are the prompt's."""
    start, end, eot = (tok.convert_tokens_to_ids(t) for t in
                       ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"))
    out, role, header, in_answer = [], None, [], False
    for i in ids:
        if i == start:
            header, role = [], None
        elif i == end:
            role = tok.decode(header)
        elif role is None:
            header.append(i)
        if role == "assistant" and i not in (start, end) and (in_answer or tok.decode([i]).strip()):
            in_answer = True
        out.append(1 if in_answer else 0)
        if i == eot:
            in_answer, role = False, None
    return out


def test_the_trained_tokens_are_exactly_the_assistant_spans_and_their_end_of_turn(tok):
    rows = chat.encode_conversations([CHAT], tok, 256)
    ids, labels = rows.row(0)
    want = assistant_tokens(ids.tolist(), tok)
    assert (labels != -100).int().tolist() == want
    assert sum(want) > 0 and want.count(1) < len(want)
    # Two turns, each ending in its end-of-turn token; the system prompt is there, untrained.
    text = tok.decode(ids)
    assert text == tok.apply_chat_template(CHAT.as_dicts(), tokenize=False)
    assert tok.decode(ids[labels != -100]) == "I am fine thanks<|eot_id|>the answer is forty two" \
                                             "<|eot_id|>"
    assert "Be brief." in text


def test_the_mask_is_the_oracles_for_every_example_of_a_chunk(tok):
    chats = [Conversation((("user", "hello " * (n % 5 + 1)), ("assistant", "fine " * (n % 3 + 1)),
                           ("user", "the weather"), ("assistant", f"{n} cats")))
             for n in range(40)]
    rows = chat.encode_conversations(chats, tok, 256)
    for r in range(len(rows)):
        ids, labels = rows.row(r)
        assert (labels != -100).int().tolist() == assistant_tokens(ids.tolist(), tok), r


def test_a_template_that_renders_the_last_turn_otherwise_still_trains_each_answer():
    # Qwen3's kind: the last answer gets an empty thinking block, earlier ones do not.
    template = LLAMA3_TEMPLATE.replace(
        "+ message['content'] | trim + '<|eot_id|>' %}",
        "+ ('<think></think>' if loop.last and message['role'] == 'assistant' else '')"
        " + message['content'] | trim + '<|eot_id|>' %}")
    tok = llama3_tokenizer(template)
    ids, labels = chat.encode_conversations([CHAT], tok, 256).row(0)
    trained = tok.decode(ids[labels != -100])
    assert trained == "I am fine thanks<|eot_id|><think></think>the answer is forty two<|eot_id|>"


def test_a_template_that_splits_turns_unlike_any_prefix_is_refused(tok):
    bad = llama3_tokenizer("{% for m in messages|reverse %}{{ m['content'] }}{% endfor %}"
                           "{% if add_generation_prompt %}A:{% endif %}")
    with pytest.raises(UsageError, match="example 1: the chat template does not render"):
        chat.encode_conversations([CHAT], bad, 256)


def test_sharegpt_and_alpaca_are_read_as_the_chats_they_are():
    share = formats.example_of({"conversations": [
        {"from": "system", "value": "Be brief."}, {"from": "human", "value": "hi"},
        {"from": "gpt", "value": "hello"}]}, "x:1")
    messages = formats.example_of({"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}]}, "x:2")
    alpaca = formats.example_of({"instruction": "Add", "input": "2 and 2", "output": "4",
                                 "system": "Be brief."}, "x:3")
    assert share == messages
    assert alpaca == Conversation((("system", "Be brief."), ("user", "Add\n\n2 and 2"),
                                   ("assistant", "4")))
    assert formats.example_of({"instruction": "Say hi", "input": "", "output": "hi"}, "x") \
        == Conversation((("user", "Say hi"), ("assistant", "hi")))


@pytest.mark.parametrize("line, words", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant message"),
    ({"messages": [{"role": "bot", "content": "hi"}]}, "role 'bot' is not one of"),
    ({"conversations": [{"from": "robot", "value": "hi"}]}, '"from" \'robot\''),
    ({"messages": "hi"}, "must be a list of messages"),
    ({"instruction": "x"}, "needs \"messages\""),
])
def test_a_line_that_is_no_form_is_refused_naming_it(tmp_path, line, words):
    path = write_jsonl(tmp_path / "d.jsonl", [line])
    with pytest.raises(UsageError, match=f"d.jsonl:1: .*{words}" if "needs" not in words
                       else "d.jsonl:1: needs"):
        batches.open_source(str(path))


def test_chats_and_prompts_are_not_mixed_in_one_data_set(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {"prompt": "a", "response": "b"}])
    with pytest.raises(UsageError, match="d.jsonl:2: a prompt or text after chats"):
        batches.open_source(str(path))


# === --seq-len: one rule, every case counted =================================


def chat_of_turns(turns: int) -> Conversation:
    messages = [("system", "Be brief.")]
    for n in range(turns):
        messages += [("user", f"tell me a story about a cat {n}"),
                     ("assistant", f"the answer is forty two {n}")]
    return Conversation(tuple(messages))


def test_a_long_chat_loses_its_earliest_turns_and_keeps_its_system_prompt(tok):
    long = chat_of_turns(6)
    whole = chat.encode_conversations([long], tok, 1024)
    last_two = chat.encode_conversations([Conversation(long.messages[:1] + long.messages[-4:])],
                                         tok, 1024)
    assert len(last_two.tokens) < len(whole.tokens)
    fitted = batches.Fitted()
    rows = chat.encode_conversations([long], tok, len(last_two.tokens), fitted)
    assert fitted == batches.Fitted(turns_dropped=1)
    assert torch.equal(rows.tokens, last_two.tokens) and torch.equal(rows.trained,
                                                                     last_two.trained)
    assert "Be brief." in tok.decode(rows.row(0)[0])


def test_an_answer_that_cannot_fit_is_cut_at_its_end_and_counted(tok):
    last = Conversation((("system", "Be brief."), ("user", "hi"),
                         ("assistant", "the answer is forty two " * 20)))
    text = tok.apply_chat_template(last.as_dicts(0, 2), tokenize=False,
                                   add_generation_prompt=True)
    prompt = len(tok.backend_tokenizer.encode(text, add_special_tokens=False).ids)
    fitted = batches.Fitted()
    rows = chat.encode_conversations([last], tok, prompt + 5, fitted)
    assert fitted == batches.Fitted(answer_cut=1)
    ids, labels = rows.row(0)
    assert len(ids) == prompt + 5 and int((labels != -100).sum()) == 5


def test_a_chat_whose_prompt_alone_fills_the_row_is_left_out_and_counted(tok):
    fitted = batches.Fitted()
    rows = chat.encode_conversations([CHAT, chat_of_turns(1)], tok, 12, fitted)
    assert fitted == batches.Fitted(skipped=2) and len(rows) == 0


def test_a_long_prompt_and_response_is_counted_as_cut(tok):
    fitted = batches.Fitted()
    batches.encode_examples([batches.Example("hello " * 40, "fine"),
                             batches.Example("hi", "fine " * 40),
                             batches.Example("hi", "fine")], tok, 16, fitted)
    assert fitted == batches.Fitted(prompt_cut=1, answer_cut=1)


# === the trainer, end to end ================================================


def messages_file(path, n: int = 24):
    return write_jsonl(path, [{"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"tell me a story about a cat {k}"},
        {"role": "assistant", "content": "the answer is forty two"}]} for k in range(n)])


def starts(out: str) -> list:
    return [r for r in map(records.parse_line, out.splitlines()) if isinstance(r, records.Start)]


def test_a_named_config_refuses_chat_data_in_one_line(trainer_cli, tmp_path):
    data = messages_file(tmp_path / "chat.jsonl")
    result = trainer_cli("train", "--model", "tiny-llama", "--data", str(data), "--steps", "1")
    assert result.returncode == 2
    (line,) = [x for x in result.stderr.splitlines() if "error" in x]
    assert line == ("trainer: error: --model tiny-llama has no chat template: chat data "
                    "(messages, ShareGPT, Alpaca) needs a model folder whose tokenizer has one")
    assert "Traceback" not in result.stderr


def test_a_model_folder_without_a_template_refuses_chat_data(trainer_cli, tmp_path):
    folder = chat_model_folder(tmp_path, template=None)
    data = messages_file(tmp_path / "chat.jsonl")
    result = trainer_cli("train", "--model", str(folder), "--data", str(data), "--steps", "1")
    assert result.returncode == 2 and "has no chat template" in result.stderr


def test_a_chat_fine_tune_packs_records_its_data_and_reads_the_cache_again(trainer_cli,
                                                                          tmp_path):
    folder = chat_model_folder(tmp_path)
    data = messages_file(tmp_path / "chat.jsonl")
    args = ("train", "--model", str(folder), "--data", str(data), "--steps", "2",
            "--seq-len", "128", "--accum", "1", "--pack", "--eval-split", "0.25",
            "--cache-dir", str(tmp_path / "cache"))
    first = trainer_cli(*args)
    assert first.returncode == 0, first.stderr
    (start,) = starts(first.stdout)
    assert start.data["form"] == "chat" and start.data["packed"] is True
    assert start.data["examples"] == 18 and start.data["rows"] < 18  # 6 of 24 held out
    assert 0 <= start.data["padding_share"] < 0.5 and start.data["cache"] == "written"
    again = trainer_cli(*args)
    assert again.returncode == 0, again.stderr
    (start_again,) = starts(again.stdout)
    assert start_again.data == {**start.data, "cache": "read"}
    assert "read from the cache" in again.stderr


def test_steps_count_the_real_tokens_of_padded_rows(trainer_cli, tmp_path):
    folder = chat_model_folder(tmp_path)
    data = messages_file(tmp_path / "chat.jsonl", n=4)
    result = trainer_cli("train", "--model", str(folder), "--data", str(data), "--steps", "2",
                         "--seq-len", "128", "--accum", "2", "--cache-dir", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    (start,) = starts(result.stdout)
    steps = [r for r in map(records.parse_line, result.stdout.splitlines())
             if isinstance(r, records.Step)]
    per_row = start.data["real_tokens"] / start.data["rows"]  # every chat is as long
    assert all(s.tokens == 2 * per_row < 2 * 128 for s in steps)
    assert start.data["padding_share"] == pytest.approx(1 - per_row / 128, abs=1e-4)


# === the cache ==============================================================


def prepared(tmp_path, folder, data, **kw):
    from trainer import models
    from trainer.config import TrainConfig
    from trainer.data import prepare

    cfg = TrainConfig(model=str(folder), data=str(data), cache_dir=str(tmp_path / "cache"),
                      **{"seq_len": 128, **kw})
    return prepare.prepare(cfg, models.resolve(cfg.model))


def test_a_second_run_neither_parses_nor_renders_nor_tokenizes(tmp_path, monkeypatch):
    folder = chat_model_folder(tmp_path)
    data = messages_file(tmp_path / "chat.jsonl")
    first = prepared(tmp_path, folder, data)

    def never(*args, **kwargs):
        raise AssertionError("read or tokenized again")

    for name in ("open_source", "encode_examples"):
        monkeypatch.setattr(batches, name, never)
    monkeypatch.setattr(chat, "encode_conversations", never)
    again = prepared(tmp_path, folder, data)
    assert again.stats == {**first.stats, "cache": "read"}
    a, b = first.batches.encoded, again.batches.encoded
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.trained, b.trained) \
        and torch.equal(a.starts, b.starts)


def test_other_data_another_template_or_seq_len_is_another_entry(tmp_path):
    folder = chat_model_folder(tmp_path)
    data = messages_file(tmp_path / "chat.jsonl")
    assert prepared(tmp_path, folder, data).stats["cache"] == "written"
    messages_file(data, n=25)
    assert prepared(tmp_path, folder, data).stats["cache"] == "written"
    assert prepared(tmp_path, folder, data, seq_len=96).stats["cache"] == "written"
    (folder / "chat_template.jinja").write_text(LLAMA3_TEMPLATE.replace("\n\n", "\n"))
    assert prepared(tmp_path, folder, data).stats["cache"] == "written"
    assert prepared(tmp_path, folder, data).stats["cache"] == "read"
    assert len(list((tmp_path / "cache" / "encoded").glob("*.bin"))) == 4


@pytest.mark.parametrize("harm", ["flip a byte", "truncate", "others may write it"])
def test_a_damaged_or_loose_cache_entry_is_not_read(tmp_path, harm):
    folder = chat_model_folder(tmp_path)
    data = messages_file(tmp_path / "chat.jsonl")
    prepared(tmp_path, folder, data)
    (entry,) = (tmp_path / "cache" / "encoded").glob("*.bin")
    raw = bytearray(entry.read_bytes())
    if harm == "flip a byte":
        raw[-3] ^= 0xFF
        entry.write_bytes(bytes(raw))
    elif harm == "truncate":
        entry.write_bytes(bytes(raw[:-8]))
    else:
        entry.chmod(0o666)
    assert cache.load(tmp_path / "cache", entry.stem) is None
    assert prepared(tmp_path, folder, data).stats["cache"] == "written"  # and made again
