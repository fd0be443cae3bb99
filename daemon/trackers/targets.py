"""``[trackers]`` and ``export --tensorboard/--mlflow``: their values checked, their sinks made."""

from __future__ import annotations

import os
from pathlib import Path

from daemon.errors import BadInput


def check_folder(text, *, where: str = "--tensorboard") -> Path:
    """The TensorBoard folder, absolute (``~`` expanded); BadInput for one that cannot hold
    runs' folders: a relative path (the daemon's working folder is not the user's), a
    system folder, the user's home folder."""
    from trainer.ownership import unusable_output

    if not isinstance(text, str) or not text.strip():
        raise BadInput(f"{where}: give a folder, got {text!r}")
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        raise BadInput(f"{where}: give an absolute path (or one starting with ~), got {text!r}")
    why = unusable_output(str(path))
    if why is not None:
        raise BadInput(f"{where}: {why}")
    return Path(os.path.abspath(path))


def check_mlflow(text, *, where: str = "--mlflow") -> str:
    """The MLflow tracking server's address (``mlflow.check_uri``)."""
    from daemon.trackers.mlflow import check_uri

    if not isinstance(text, str):
        raise BadInput(f"{where}: give the tracking server's address, got {text!r}")
    return check_uri(text, where)


def sinks(*, tensorboard: str | None = None, mlflow: str | None = None,
          experiment: str = "rngdctl", timeout: float = 10.0, output_mode: str = "0700"):
    """The trackers asked for: TensorBoard first, then MLflow."""
    from trainer.ownership import parse_mode

    out = []
    if tensorboard is not None:
        from daemon.trackers.tensorboard import TensorBoard

        out.append(TensorBoard(check_folder(tensorboard), mode=parse_mode(output_mode)))
    if mlflow is not None:
        from daemon.trackers.mlflow import MLflow

        out.append(MLflow(check_mlflow(mlflow), experiment=experiment, timeout=timeout))
    return out


def configured(config) -> list:
    """The sinks ``[trackers]`` names (a home's ``Config``)."""
    trackers = config.trackers
    return sinks(tensorboard=trackers.tensorboard, mlflow=trackers.mlflow,
                 experiment=trackers.mlflow_experiment, timeout=trackers.timeout,
                 output_mode=config.daemon.output_mode)
