"""Models from a local folder, the named configs, card picking, import hygiene."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trainer import models
from trainer.backends import kinds
from trainer.errors import UsageError


def test_named_configs_build_without_downloads():
    llama = models.build(models.resolve("llama-3.1-8b-mini"), 256, seed=0)
    cfg = llama.config
    assert cfg.num_attention_heads // cfg.num_key_value_heads == 4  # as Llama-3.1-8B
    assert cfg.rope_parameters["rope_type"] == "llama3"
    qwen = models.build(models.resolve("tiny-qwen2"), 256, seed=0)
    assert models.is_tied(qwen) and not models.is_tied(llama)


def test_unknown_model_is_bad_input():
    with pytest.raises(UsageError, match="unknown model"):
        models.resolve("gpt-17")


def test_a_model_folder_trains_with_its_own_tokenizer(tmp_path, restore_signals):
    from trainer.config import TrainConfig
    from trainer.data import tokenizer
    from trainer.records import RecordWriter, Start, Step, parse_line
    from trainer.train import Recipe

    texts = ["질문 하나 답 하나", "hello there friend"] * 40
    tok = tokenizer.trained(texts, 300, tmp_path / "cache")
    folder = tmp_path / "model"
    model = models.build(models.resolve("tiny-qwen2"), len(tok), seed=3)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": "질문", "response": t}) for t in texts))

    lines = []

    class Sink:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass

    cfg = TrainConfig(model=str(folder), resident_layers=1, backend="cpu,cpu", steps=3,
                      seq_len=16, data=str(data), cache_dir=str(tmp_path / "cache"))
    recipe = Recipe(cfg, RecordWriter(Sink()))
    recipe.setup()
    recipe.run()
    recs = [parse_line(s) for s in lines]
    start = next(r for r in recs if isinstance(r, Start))
    assert start.config["vocab_size"] == len(tok) and start.config["tied_head"] is True
    assert sum(isinstance(r, Step) for r in recs) == 3


def _fake_holder(proc, pid: int, *targets: str) -> None:
    fd = proc / str(pid) / "fd"
    fd.mkdir(parents=True)
    for n, target in enumerate(targets):
        os.symlink(target, fd / str(n + 3))
    (proc / str(pid) / "cmdline").write_bytes(b"python\0bench.py\0")


def test_a_card_is_held_by_the_process_with_its_device_files_open_and_npu1_is_not_npu10(tmp_path):
    proc = tmp_path / "proc"
    _fake_holder(proc, 4242, "/dev/rngd/npu0pe0-3", "/dev/null")
    _fake_holder(proc, 4343, "/dev/rngd/npu10mgmt")
    held = kinds.rngd_holders(0, str(proc))
    assert [(h.pid, h.cmdline) for h in held] == [(4242, "python bench.py")]
    assert kinds.rngd_holders(1, str(proc)) == []
    assert [h.pid for h in kinds.rngd_holders(10, str(proc))] == [4343]
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in ("npu0mgmt", "npu0pe0", "npu1mgmt", "npu1pe0"):
        (dev / n).touch()
    assert kinds.present_rngd_cards(str(dev)) == [0, 1]


def test_records_and_the_package_import_no_torch():
    code = "import sys, trainer, trainer.records; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.stdout.strip() == "False", out.stderr


def test_a_real_host_allocation_failure_becomes_out_of_memory_with_its_place():
    import torch

    from trainer.engine.layer_engine import LayerEngine
    from trainer.errors import DeviceOutOfMemory

    model = models.build(models.resolve("tiny-llama"), 128, seed=0)
    engine = LayerEngine(model, kinds.parse("cpu"), 0, 1e-3, 0.0, 1.0)
    engine.where = "host optimizer"
    with (pytest.raises(DeviceOutOfMemory, match="in host optimizer: .*can't allocate memory"),
          engine._guard("host_optim", ())):
        torch.empty(2**60, dtype=torch.uint8)  # more than any host has
