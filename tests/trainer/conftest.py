"""Fixtures for the trainer's tests: tiny models, fixed micro-batches, the CLI in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NSMC = REPO.parent / "shared" / "data" / "nsmc" / "ratings_train_sample.txt"


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def nsmc_path() -> Path:
    if not NSMC.exists():
        pytest.skip(f"the NSMC sample is not at {NSMC} (the shared folder beside the repository)")
    return NSMC


@pytest.fixture
def synthetic_steps():
    """Ten steps of two fixed synthetic micro-batches each (vocab 128, seq 32)."""
    from trainer.data import batches

    stream = iter(batches.make_batches(batches.open_source("synthetic"), None, 32, 1, 0, 128))
    return [[next(stream) for _ in range(2)] for _ in range(10)]


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.fixture
def trainer_cli(tmp_path):
    """Runs ``python -m trainer ARGS`` in a subprocess; returns the CompletedProcess."""

    # A hung trainer fails the test; a slow one must not: on a loaded 2-core host
    # (load 18 with a CPU hog beside it) an 18-step run took more than 120 s.
    def run(*args: str, env: dict | None = None, timeout: float = 600):
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", "RNGDCTL_CACHE": str(tmp_path / "cache"),
                    "PYTHONPATH": str(REPO), **(env or {})}
        return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=tmp_path,
                              env=full_env, capture_output=True, text=True, timeout=timeout,
                              check=False)

    return run
