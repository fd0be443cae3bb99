"""What the tracker tests share: recorded steps, TensorBoard's own reader, a real MLflow
server on 127.0.0.1 with a SQLite store, a launcher that feeds a tick its lines.

TensorBoard and MLflow are only the tests' (the dev extra): where either is missing its
tests skip, naming it."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.queue.conftest import ScriptedLauncher
from tests.stepmodel.synthetic_logs import make_pass
from trainer import records

needs_tensorboard = pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None,
    reason="TensorBoard's reader is not installed (the dev extra: pip install -e '.[dev]')")
needs_mlflow = pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None,
    reason="MLflow (its server and MlflowClient) is not installed (the dev extra)")

T0 = 1_790_000_000.0
#: The tracker tests' MLflow processes: no telemetry, no job runner (a dozen processes).
MLFLOW_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
              "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
os.environ.update(MLFLOW_ENV)  # MlflowClient in this process too


def passes(steps: int, *, first: int = 1) -> tuple[list, list]:
    """A baseline and a main pass of ``steps`` steps from the step model's synthetic terms,
    steps ``first`` on."""
    baseline = make_pass(cards=2, raw=False, steps=steps)[first - 1:]
    main = make_pass(cards=2, resident_per_card=8, label=records.MAIN, raw=False,
                     steps=steps)[first - 1:]
    return baseline, main


def start_lines(steps: list) -> list[str]:
    last = steps[-1].extra
    config = {"backend": "cpu", "cards": last["cards"], "layers": last["layers"],
              "resident_layers": last["resident_per_card"], "seq_len": last["seq_len"],
              "accum": last["accum"], "micro_batch": 1, "vocab_size": 128256,
              "hidden_size": 4096, "tied_head": False,
              "params_per_layer": last["params_per_layer"]}
    return [records.dumps(records.Start(config_label=steps[0].config_label, config=config,
                                        time=T0))]


def eval_line(step: int, loss: float) -> str:
    return records.dumps(records.Eval(config_label=records.MAIN, step=step, loss=loss,
                                      tokens=640, examples=10, seconds=0.5, time=T0 + step))


def more_steps(store, run_id: int, first: int, last: int) -> None:
    """Steps ``first`` to ``last`` of both passes, ingested as the daemon would."""
    from daemon.run.ingest import Ingest

    baseline, main = passes(last, first=first)
    Ingest(store).feed(run_id, [records.dumps(s) for s in (*baseline, *main)])


# === TensorBoard's reader =====================================================


def read_events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files in ``folder`` (not below it), as TensorBoard's
    EventAccumulator reads them: tag -> [(step, value)], none sampled away."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)]
            for tag in reader.Tags()["scalars"]}


def read_accumulator(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    reader.Reload()
    return reader


# === a real MLflow server ======================================================


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on 127.0.0.1:``port`` with a SQLite store and served artifacts,
    in ``folder``; ``start()`` waits for its /health, ``stop()`` ends its whole group."""

    def __init__(self, folder: Path, port: int):
        self.folder, self.port = folder, port
        self.uri = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> MlflowServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
             "--artifacts-destination", str(self.folder / "artifacts")],
            cwd=self.folder, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, env={**os.environ, **MLFLOW_ENV})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.proc.returncode}: "
                                   f"{(self.folder / 'server.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"{self.uri}/health", timeout=2) as answer:
                if answer.status == 200:
                    return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)
        self.proc = None

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)


# === a daemon whose runs print the steps the test gives ========================


class FeedingLauncher(ScriptedLauncher):
    """A launcher whose active runs print, at each follow, the lines queued for them
    (``lines[run_id]``): what a tick reads from a trainer's log."""

    name = "feeding"

    def __init__(self, store):
        from daemon.run.ingest import Ingest

        super().__init__()
        self.ingest = Ingest(store)
        self.lines: dict[int, list[str]] = {}

    def follow(self, run):
        lines = self.lines.pop(run["id"], [])
        if lines:
            self.ingest.feed(run["id"], lines)

    def recover(self, run):
        return None  # still running: followed on


def step_lines(first: int, last: int) -> list[str]:
    """Steps ``first`` to ``last`` of both passes as the trainer prints them."""
    baseline, main = passes(last, first=first)
    return [records.dumps(s) for s in (*baseline, *main)]
