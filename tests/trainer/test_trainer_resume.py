"""Exact resume: a run killed at any instant goes on from its newest checkpoint as if it
had never stopped, bit for bit on the CPU; SIGTERM stops it after a whole step with one."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import records
from trainer.config import TrainConfig
from trainer.output import checkpoint
from trainer.records import End, Event, RecordWriter, Step
from trainer.train import Recipe

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

RUN = {"model": "tiny-llama", "backend": "cpu,cpu", "resident_layers": 1, "steps": 14,
       "seq_len": 16, "accum": 2, "lr": 1e-3, "baseline": True, "baseline_steps": 10,
       "interleave": 2, "settle": 3, "threads": 1}


def argv(cfg: dict) -> list[str]:
    out = []
    for key, value in cfg.items():
        flag = "--" + {"checkpoint": "checkpoint-layers"}.get(key, key).replace("_", "-")
        if value is True:
            out.append(flag)
        elif value not in (False, None):
            out += [flag, str(value)]
    return out


def reference_losses(**cfg) -> dict[tuple[str, int], float]:
    """Every step's loss of the run done in one go, in this process."""
    sink = io.StringIO()
    recipe = Recipe(TrainConfig(**cfg), RecordWriter(sink))
    recipe.setup()
    recipe.run()
    return losses(sink.getvalue())


def losses(text: str) -> dict[tuple[str, int], float]:
    recs = [records.parse_line(line) for line in text.splitlines()]
    return {(r.config_label, r.step): r.loss for r in recs if isinstance(r, Step)}


def trainer(cfg: dict, tmp_path, **popen) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RNGDCTL_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "trainer", "train", *argv(cfg)],
                            env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, **popen)


def killed_at_random(cfg: dict, tmp_path, kills: int, seed: int) -> tuple[dict, list[str]]:
    """The run SIGKILLed ``kills`` times after a random number of new steps, then left to
    finish; (every step's loss, each loss the same every time it was made; all output)."""
    rng = random.Random(seed)
    seen: dict[tuple[str, int], float] = {}
    outputs = []
    for attempt in range(kills + 1):
        proc = trainer(cfg, tmp_path)
        target = rng.randint(1, 7) if attempt < kills else None
        lines, new = [], 0
        for line in proc.stdout:
            lines.append(line)
            if target is not None and '"kind":"step"' in line:
                new += 1
                if new == target:
                    proc.kill()  # mid-step, mid-checkpoint: wherever the trainer is now
                    break
        proc.stdout.close()
        proc.wait(timeout=600)
        text = "".join(lines)
        outputs.append(text)
        for key, loss in losses(text).items():
            assert seen.setdefault(key, loss) == loss, f"step {key} made twice, differently"
    return seen, outputs


@pytest.mark.parametrize("kind", [{"lora": 0}, {"lora": 4}], ids=["full", "lora"])
def test_a_run_killed_five_times_trains_bit_for_bit_as_one_run(kind, tmp_path):
    # --baseline runs an all-offload pass beside the resident main pass, interleaved:
    # both configs, both passes' state in every checkpoint.
    cfg = {**RUN, **kind}
    expected = reference_losses(**cfg)
    seed = random.randrange(1 << 30)
    got, outputs = killed_at_random({**cfg, "out": str(tmp_path / "out"), "checkpoint_every": 3},
                                    tmp_path, kills=5, seed=seed)
    assert got == expected, f"kill seed {seed}"
    assert json.loads(outputs[-1].splitlines()[-1])["status"] == "ok"
    resumes = [line for text in outputs for line in text.splitlines() if '"resume"' in line]
    assert resumes, "no attempt went on from a checkpoint"


def test_sigterm_finishes_the_step_writes_a_checkpoint_and_ends_preempted(tmp_path):
    cfg = {**RUN, "baseline": False, "steps": 10_000, "out": str(tmp_path / "out")}
    proc = trainer(cfg, tmp_path)
    for line in proc.stdout:
        if '"kind":"step"' in line and '"step":3,' in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM
    recs = [records.parse_line(line) for line in rest.splitlines()]
    end = recs[-1]
    assert isinstance(end, End) and end.status == "preempted"
    (written,) = [r for r in recs if isinstance(r, Event) and r.event == records.CHECKPOINT]
    steps_after = [r.step for r in recs if isinstance(r, Step)]
    # The step in progress finished, and the checkpoint holds exactly what was written.
    assert written.data["step"] == (steps_after[-1] if steps_after else 3)
    assert end.data["checkpoint"] == written.data["path"]
    assert checkpoint.verify(written.data["path"]).step == written.data["step"]
