"""Tests against the real furiosa-torch, run by ``make test-furiosa`` in the furiosa environment.

furiosa-torch pins torch 2.10.0, so it is not in .venv: deploy/furiosa/env.py builds a second
environment (or reuses the cached one) and runs this folder with its python, before the
numerics tests: torch autoloads furiosa-torch there, and the first device touch fixes the PE
fusion for the process, so the card tests must fuse first. Where that
environment could not be built, these tests skip and say why; elsewhere (plain pytest in .venv)
they skip naming the command that runs them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "deploy" / "furiosa"))
import env as furiosa_env  # deploy/furiosa/env.py: where the environment lives


def _why_not_here() -> str | None:
    if importlib.util.find_spec("furiosa") is not None and \
            importlib.util.find_spec("furiosa.torch") is not None:
        return None
    failed = furiosa_env.failed_file(furiosa_env.env_dir())
    if failed.exists():
        return f"the furiosa environment could not be built: {failed.read_text().strip()}"
    return ("furiosa-torch is not installed in this python; `make test-furiosa` runs these "
            f"tests in {furiosa_env.env_dir()}")


def pytest_collection_modifyitems(config, items):
    # The first device touch fixes the PE fusion for the whole process, and the op report's
    # tracing touches one: the tests that fuse the cards (test_package.py) run first.
    items.sort(key=lambda item: Path(str(item.fspath)).name != "test_package.py")
    why = _why_not_here()
    if why is None:
        return
    skip = pytest.mark.skip(reason=why)
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(skip)


def release_path(requirement: str) -> Path:
    """The folder holding an older furiosa-torch release in the environment (see env.py)."""
    return furiosa_env.release_dir(Path(sys.prefix), requirement)


@pytest.fixture
def python_in(tmp_path):
    """Runs ``python ARGS`` (this python) in a subprocess; ``first`` goes before the repo on the
    path (an older furiosa-torch release), ``env`` adds variables. Returns the CompletedProcess."""

    def run(*args: str, first: Path | None = None, timeout: float = 300,
            env: dict[str, str] | None = None):
        path = [str(first)] if first else []
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RNGDCTL_CACHE": str(tmp_path / "cache"),
               "PYTHONPATH": os.pathsep.join([*path, str(REPO)]), **(env or {})}
        return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    return run
