"""What made a run: the versions of the packages it ran with and the code's commit.

Both go into every ``start`` record and the saved model's ``rngdctl.json``.
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from trainer import records


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version(), "contract": records.SCHEMA_VERSION}
    for pkg in ("torch", "transformers", "tokenizers", "furiosa-torch"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    from trainer.backends.furiosa_torch import smi_versions

    return {**out, **smi_versions()}


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
