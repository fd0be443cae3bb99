"""The furiosa environment: torch 2.10.0 + furiosa-torch beside the project's torch 2.13.0 .venv.

furiosa-torch pins torch==2.10.0 and the registry's 2.10.0 is the CUDA build (about 7 GB with
its nvidia-* wheels), so it cannot share .venv and is too big to build per clone. It is built
once OUTSIDE the clone, in a folder named after a hash of its pins, and reused until a pin
changes. The project itself is not installed there: tests and the trainer run the clone's code
with PYTHONPATH, so one cached environment serves every clone.

    python3 deploy/furiosa/env.py path          # where the environment for these pins lives
    python3 deploy/furiosa/env.py build         # build it unless it is already there
    python3 deploy/furiosa/env.py pytest ARGS   # build or reuse it, then run pytest with it

A failed build leaves no stamp and writes the reason to ``<env>.failed``; ``pytest`` then runs
the tests with the calling python, where tests/furiosa skip naming that reason. Builds of one
environment by several clones at once are serialised by a lock file beside it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Not the project's (it is not installed there): the test runner.
EXTRA_DEPS = ["pytest<9"]
# Older releases the trainer also supports, each installed --no-deps into a folder of its own
# (they pin the same torch 2.10.0); tests put one first on PYTHONPATH to run against it.
OTHER_RELEASES = ["furiosa-torch==2026.2.0"]
BUILD_TIMEOUT_S = 3600


def pins() -> list[str]:
    """The furiosa extra plus the test runner: what the environment is keyed by."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["furiosa"]) + EXTRA_DEPS


def env_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = "\n".join([f"py{sys.version_info.major}.{sys.version_info.minor}", *pins(),
                     *OTHER_RELEASES])
    return cache / "rngdctl" / f"furiosa-env-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def release_dir(env: Path, requirement: str) -> Path:
    """Where an older release lies: ``<env>/releases/furiosa-torch-2026.2.0``."""
    return env / "releases" / requirement.replace("==", "-")


def failed_file(env: Path) -> Path:
    return env.with_name(env.name + ".failed")


def build() -> Path:
    """The environment's folder once built, else its ``.failed`` file (which says why)."""
    env = env_dir()
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.with_name(env.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another clone may be building this very env
        return _build_locked(env)


def _build_locked(env: Path) -> Path:
    stamp, failed = env / ".installed", failed_file(env)
    if stamp.exists():
        return env
    shutil.rmtree(env, ignore_errors=True)
    env.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    python = str(env / "bin" / "python")
    steps = [[sys.executable, "-m", "venv", str(env)],
             [python, "-m", "pip", "install", "-q", *pins()]]
    steps += [[python, "-m", "pip", "install", "-q", "--no-deps", "--target",
               str(release_dir(env, r)), r] for r in OTHER_RELEASES]
    for cmd in steps:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            return _fail(failed, f"{' '.join(cmd[:4])} ran past {BUILD_TIMEOUT_S} s")
        if done.returncode != 0:
            errors = [line for line in (done.stderr or done.stdout).strip().splitlines()
                      if line.startswith("ERROR")] or ["no error line"]
            return _fail(failed, f"{' '.join(cmd[:5])} exited {done.returncode}: {errors[-1]}")
    failed.unlink(missing_ok=True)
    stamp.write_text(f"built in {time.monotonic() - started:.0f} s\n"
                     + "\n".join(pins() + OTHER_RELEASES) + "\n")
    return env


def _fail(failed: Path, reason: str) -> Path:
    failed.write_text(reason + "\n")
    print(f"furiosa env: not built: {reason}", file=sys.stderr)
    return failed


def run_pytest(args: list[str]) -> int:
    """pytest ARGS with the environment's python, or with this one (the tests skip) if unbuilt."""
    where = build()
    python = where / "bin" / "python" if where.is_dir() else Path(sys.executable)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RNGDCTL_FURIOSA_ENV": str(env_dir())}
    print(f"furiosa tests with {python}", file=sys.stderr)
    done = subprocess.run([str(python), "-m", "pytest", *args], cwd=REPO, env=env, check=False)
    return done.returncode


def main(argv: list[str]) -> int:
    if argv[1:] == ["path"]:
        print(env_dir())
        return 0
    if argv[1:] == ["build"]:
        where = build()
        print(where)
        return 0 if where.is_dir() else 1
    if argv[1:2] == ["pytest"]:
        return run_pytest(argv[2:])
    print("usage: env.py path|build|pytest ARGS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
