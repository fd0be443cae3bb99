"""What the trainer bounds or refuses before it allocates (issue 36, items 4, 8 and 9).

A model config.json, a data file and a held-out set may come from anyone: each is read
within bounds, and anything the trainer cannot use is one line on stderr and exit 2, before
an allocation. SIGTERM stops an evaluation between two micro-batches.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import bound_by_mode_bits, needs_mode_bits
from tests.model_configs import LLAMA_405B, TINY, model_folder
from trainer import models, records
from trainer.config import TrainConfig
from trainer.data import batches
from trainer.errors import Preempted, UsageError

REPO = Path(__file__).resolve().parents[2]

def trainer(tmp_path, *args: str, bound: bool = False, timeout: float = 300):
    """``python -m trainer train ARGS`` in a subprocess (``bound``: stopped by mode bits)."""
    argv = [sys.executable, "-m", "trainer", "train", "--steps", "1", "--seq-len", "16",
            "--accum", "1", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
           "RNGDCTL_CACHE": str(tmp_path / "cache")}
    return subprocess.run(bound_by_mode_bits(argv) if bound else argv, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def assert_one_line_exit_2(proc, *words: str) -> None:
    assert proc.returncode == records.EXIT_USAGE, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def jsonl(path: Path, texts) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


# === model configs (items 4 and 8) ===========================================

NOT_A_CONFIG = {
    "a trillion layers": ({**TINY, "num_hidden_layers": 10 ** 12}, "num_hidden_layers"),
    "not JSON": (b"not json", "not JSON"),
    "a list": (b"[1, 2]", "not a JSON object"),
    "not UTF-8": (b'{"model_type": "\xff"}', "not UTF-8"),
    "nested past any config": (b"[" * 200_000, "config"),
    "a size as text": ({**TINY, "hidden_size": "64"}, "hidden_size"),
    "a size as true": ({**TINY, "num_hidden_layers": True}, "num_hidden_layers"),
    "no vocabulary": ({k: v for k, v in TINY.items() if k != "vocab_size"}, "vocab_size"),
    "another family": ({**TINY, "model_type": "gpt2"}, "model_type"),
    "heads that do not divide": ({**TINY, "num_key_value_heads": 3}, "key-value heads"),
}


@pytest.mark.parametrize("name", NOT_A_CONFIG)
def test_a_model_config_that_is_not_one_is_refused_in_one_line(tmp_path, name):
    config, words = NOT_A_CONFIG[name]
    with pytest.raises(UsageError, match=words) as refused:
        models.resolve(str(model_folder(tmp_path, config)))
    assert "config.json" in str(refused.value) and "\n" not in str(refused.value)


def test_a_config_json_claiming_a_trillion_layers_ends_the_trainer_in_one_line(tmp_path):
    folder = model_folder(tmp_path, {**TINY, "num_hidden_layers": 10 ** 12})
    assert_one_line_exit_2(trainer(tmp_path, "--model", str(folder)), "num_hidden_layers",
                           "1,024")


def test_an_invalid_config_json_ends_the_trainer_in_one_line(tmp_path):
    folder = model_folder(tmp_path, b"[1]")
    assert_one_line_exit_2(trainer(tmp_path, "--model", str(folder)), "config.json")


def test_a_model_the_host_cannot_hold_is_refused_before_anything_is_allocated(tmp_path):
    folder = model_folder(tmp_path, LLAMA_405B)
    proc = trainer(tmp_path, "--model", str(folder))
    assert_one_line_exit_2(proc, "GB of host memory", "more than the")
    end = records.parse_line(proc.stdout.strip().splitlines()[-1])
    assert end.status == "error"


def test_the_memory_check_counts_both_interleaved_passes_and_the_larger_of_two_in_a_row():
    from trainer import footprint, modelconfig

    tiny = modelconfig.named("tiny-llama")
    alone = footprint.run_host_bytes(tiny, cards=2, resident_per_card=1, backend="cpu,cpu",
                                     baseline=False, interleave=0)
    offload = footprint.run_host_bytes(tiny, cards=2, resident_per_card=0, backend="cpu,cpu",
                                       baseline=False, interleave=0)
    in_a_row = footprint.run_host_bytes(tiny, cards=2, resident_per_card=1, backend="cpu,cpu",
                                        baseline=True, interleave=0)
    interleaved = footprint.run_host_bytes(tiny, cards=2, resident_per_card=1,
                                           backend="cpu,cpu", baseline=True, interleave=2)
    assert in_a_row == max(alone, offload) and interleaved == alone + offload


@pytest.mark.parametrize("name, config", [
    ("tiny-llama", None), ("tiny-qwen2", None), ("llama-3.1-8b-mini", None),
    ("llama with biases and its own head size",
     {**TINY, "attention_bias": True, "mlp_bias": True, "head_dim": 8}),
    ("qwen2 with a tied head", {**TINY, "model_type": "qwen2", "tie_word_embeddings": True}),
])
def test_the_parameters_a_config_gives_are_the_ones_transformers_builds(tmp_path, name, config):
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer import footprint, modelconfig

    if config is None:
        spec = models.resolve(name)
        model = models.build(spec, 256, seed=0)
        arch = modelconfig.named(name, vocab=256)
    else:
        arch = modelconfig.read(model_folder(tmp_path, config))
        values = {k: v for k, v in config.items() if k != "model_type"}
        model = AutoModelForCausalLM.from_config(
            AutoConfig.for_model(config["model_type"], **values))
    edge = sum(p.numel() for p in model.parameters()) - arch.layers * models.params_per_layer(model)
    assert arch.params_per_layer == models.params_per_layer(model)
    assert footprint.edge_params(arch.vocab, arch.hidden, arch.tied) == edge
    assert arch.tied == models.is_tied(model)


# === unreadable paths (item 8) ===============================================
# Run as root without the capabilities that take it past mode bits (tests/conftest.py).


@needs_mode_bits
@pytest.mark.parametrize("option, under", [
    ("--data", "data.jsonl"), ("--model", "model"), ("--out", "out/run"),
    ("--eval-data", "data.jsonl")])
def test_a_path_under_a_folder_the_user_cannot_read_is_one_line(tmp_path, locked_dir,
                                                                option, under):
    path = str(locked_dir / under)
    extra = {"--data": ["--data", f"jsonl:{path}"],
             "--eval-data": ["--data", str(jsonl(tmp_path / "d.jsonl", ["hi there"] * 4)),
                             "--eval-data", f"jsonl:{path}"]}.get(option, [option, path])
    assert_one_line_exit_2(trainer(tmp_path, *extra, bound=True), path)


@needs_mode_bits
def test_a_tokenizer_cache_the_user_cannot_write_is_one_line(tmp_path, locked_dir):
    data_file = jsonl(tmp_path / "d.jsonl", ["hi there"] * 4)
    proc = trainer(tmp_path, "--data", str(data_file), "--cache-dir", str(locked_dir / "cache"),
                   bound=True)
    assert_one_line_exit_2(proc, "--cache-dir")


# === data files (items 8 and 9) ==============================================


def test_non_utf8_data_is_one_line_naming_the_file_and_its_line(tmp_path):
    bad_jsonl = tmp_path / "d.jsonl"
    bad_jsonl.write_bytes(b'{"text": "fine"}\n{"text": "\xff\xfe"}\n')
    bad_tsv = tmp_path / "nsmc.txt"
    bad_tsv.write_bytes(b"id\tdocument\tlabel\n1\t\xc3\x28\t1\n")
    with pytest.raises(UsageError, match=r"d\.jsonl:2: not UTF-8"):
        batches.open_source(str(bad_jsonl))
    with pytest.raises(UsageError, match=r"nsmc\.txt:2: not UTF-8"):
        batches.open_source(f"nsmc:{bad_tsv}")
    assert_one_line_exit_2(trainer(tmp_path, "--data", str(bad_jsonl)), "d.jsonl:2")


def test_a_line_past_the_cap_is_refused_before_it_reaches_the_tokenizer(tmp_path):
    path = tmp_path / "one-line.jsonl"
    path.write_text(json.dumps({"text": "x" * (1 << 20)}) + "\n")  # past the 1 MiB a line
    with pytest.raises(UsageError, match=r"one-line\.jsonl:1: a line longer than"):
        batches.open_source(str(path))


def test_a_data_file_past_max_data_bytes_is_one_line_saying_how_to_read_it(tmp_path):
    path = jsonl(tmp_path / "d.jsonl", ["hello there"] * 20)
    proc = trainer(tmp_path, "--data", str(path), "--max-data-bytes", "100")
    assert_one_line_exit_2(proc, "past --max-data-bytes 100", str(path))


def test_a_data_file_that_is_a_fifo_is_refused_without_waiting_on_it(tmp_path):
    fifo = tmp_path / "d.jsonl"
    os.mkfifo(fifo)
    assert_one_line_exit_2(trainer(tmp_path, "--data", str(fifo), timeout=120),
                           "not a regular file")


def test_a_data_file_is_read_a_line_at_a_time(tmp_path):
    import tracemalloc

    from trainer import datafile

    path = jsonl(tmp_path / "d.jsonl", ["a short review of a film " * 4] * 200_000)
    assert path.stat().st_size > 20e6
    tracemalloc.start()
    try:
        datafile.check(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * datafile.MAX_LINE_BYTES  # a line and the reader's buffer, not the file


# === encoding and the held-out set (item 9) ==================================

SETUP_RSS = """
import io, json, resource, sys
from trainer.config import TrainConfig
from trainer.records import RecordWriter
from trainer.train import Recipe
import transformers, tokenizers  # loaded before the measure: not the data's cost
cfg = TrainConfig(model="tiny-llama", steps=1, seq_len=1024, accum=1, data=sys.argv[1],
                  eval_split=0.5, cache_dir=sys.argv[2])
recipe = Recipe(cfg, RecordWriter(io.StringIO()))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
recipe.setup()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def test_reading_a_data_set_costs_its_tokens_not_a_padded_row_per_example(tmp_path):
    # 8,000 short examples at --seq-len 1024: padded rows of ids and labels are 131 MB, and
    # every held-out micro-batch made at once 98 MB more; their tokens are a few hundred KB.
    path = jsonl(tmp_path / "d.jsonl", [f"review {i} was fine" for i in range(8000)])
    proc = subprocess.run([sys.executable, "-c", SETUP_RSS, str(path), str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600, check=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    grown = int(proc.stdout.strip().splitlines()[-1])
    assert grown < 64e6, f"setup grew the process by {grown / 1e6:.0f} MB"


def run_recipe(tmp_path, should_stop=None, **overrides):
    import io

    from trainer.train import Recipe

    sink = io.StringIO()
    cfg = TrainConfig(**{"model": "tiny-llama", "steps": 2, "seq_len": 16, "accum": 1,
                         "threads": 1, "cache_dir": str(tmp_path / "cache"), **overrides})
    recipe = Recipe(cfg, records.RecordWriter(sink), **({"should_stop": should_stop}
                                                         if should_stop else {}))
    return recipe, sink


def evals(sink) -> list:
    parsed = [records.parse_line(line) for line in sink.getvalue().splitlines()]
    return [r for r in parsed if isinstance(r, records.Eval)]


def test_a_held_out_set_past_the_cap_is_a_seeded_draw_of_that_many(tmp_path,
                                                                    restore_signals):
    texts = [f"example number {i}" for i in range(1200)]
    train = jsonl(tmp_path / "train.jsonl", texts[:100])
    held = jsonl(tmp_path / "held.jsonl", texts)
    recipe, sink = run_recipe(tmp_path, data=str(train), eval_data=str(held), micro_batch=8)
    recipe.setup()
    recipe.run()
    first, last = evals(sink)
    assert first.examples == last.examples == TrainConfig.eval_max_examples == 1000
    assert first.tokens == last.tokens  # the same draw at every evaluation
    again, sink = run_recipe(tmp_path, data=str(train), eval_data=str(held), micro_batch=8,
                             eval_max_examples=50)
    again.setup()
    again.run()
    assert [e.examples for e in evals(sink)] == [50, 50]


def test_a_stop_in_an_evaluation_after_a_step_checkpoints_that_step_and_says_where(
        tmp_path, restore_signals):
    calls = itertools.count()

    def stop() -> bool:  # at the third micro-batch of the evaluation after step 2
        passes = getattr(recipe, "passes", None)
        return bool(passes) and passes[-1].steps_done == 2 and next(calls) >= 2

    recipe, _ = run_recipe(tmp_path, should_stop=stop, steps=4, eval_data="synthetic",
                           eval_every=2, out=str(tmp_path / "out"))
    recipe.setup()
    with pytest.raises(Preempted) as stopped:
        recipe.run()
    assert ("during the held-out evaluation after main step 2 (micro-batch 3 of "
            f"{batches.SYNTHETIC_EVAL})") in str(stopped.value)
    assert Path(stopped.value.checkpoint).name == "step-2"


def test_sigterm_during_an_evaluation_stops_the_trainer_within_a_micro_batch(tmp_path):
    # 20,000 held-out examples at seq 1024, micro-batches of 8: whole, 2,500 forwards, far
    # past the wait below; drawn to the default 1,000, still 125. SIGTERM is sent once the
    # placement line is out, just before the first evaluation; the stop is asked before each
    # micro-batch, so it stops within one of the signal.
    train = jsonl(tmp_path / "train.jsonl", [f"a film review {i}" for i in range(200)])
    held = jsonl(tmp_path / "held.jsonl", [f"another review {i} here" for i in range(20_000)])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
           "RNGDCTL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "train", "--steps", "2", "--seq-len", "1024",
         "--accum", "1", "--micro-batch", "8", "--data", str(train), "--eval-data", str(held)],
        cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for line in proc.stderr:  # the placement line comes just before the evaluation
            if "main: card 0" in line:
                break
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM
    end = records.parse_line(out.strip().splitlines()[-1])
    assert end.status == "cancelled"
    stopped = re.search(r"during the held-out evaluation after main step 0 \(micro-batch "
                        r"(\d+) of 125\)", end.error)
    assert stopped and int(stopped[1]) < 125, end.error  # the evaluation never ended
    assert '"kind":"eval"' not in out


def test_the_host_memory_is_the_hosts_or_less():
    from trainer import footprint

    have = footprint.host_memory_bytes()
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert have is not None and 0 < have <= physical


def test_a_named_model_is_priced_at_its_largest_vocabulary():
    from trainer import modelconfig

    assert modelconfig.named("tiny-llama").vocab == modelconfig.MAX_TRAINED_VOCAB
    assert batches.tokenizer_vocab(["x" * 10 ** 7]) == modelconfig.MAX_TRAINED_VOCAB


def test_packed_rows_give_the_micro_batches_a_padded_encoding_gives():
    class Tok:
        bos_token_id, eos_token_id, pad_token_id = 1, 2, 0

        def __call__(self, texts, add_special_tokens):
            return {"input_ids": [[3 + ord(c) % 50 for c in t] for t in texts]}

    examples = [batches.Example("prompt " * n, "answer" * (n % 3)) for n in range(1, 30)]
    packed = batches.encode_examples(examples, Tok(), 24)
    ids, labels = packed.dense(torch.arange(len(packed)))
    for i, e in enumerate(examples):  # one row each: [bos] prompt answer eos, cut to fit
        a = Tok()([e.answer], False)["input_ids"][0] + [2]
        p = Tok()([e.prompt], False)["input_ids"][0]
        a = a[:22]
        p = p[max(0, len(p) - (23 - len(a))):]
        row = [1, *p, *a]
        assert ids[i, :len(row)].tolist() == row and (ids[i, len(row):] == 0).all()
        assert labels[i, 1 + len(p):len(row)].tolist() == a
        assert (labels[i, :1 + len(p)] == -100).all() and (labels[i, len(row):] == -100).all()
    assert packed.label_tokens == int((labels[:, 1:] != -100).sum())
    picked = packed[torch.tensor([5, 2])]
    assert torch.equal(picked.dense(torch.arange(2))[0], ids[[5, 2]])
