"""The host a benchmark ran on, and load beside it: shared by the benchmarks that print figures.

``cpu_line()``: lscpu's model name and whether the CPU has AVX2 and AVX-512 (the start-up and
frame targets are judged on the slowest host of a kind, an AVX2 one without AVX-512).
``hogs(n)``: n busy-looping processes, each in a session of its own (as another user's work),
for a loaded measurement.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import sys
from pathlib import Path


def _lscpu_model() -> str | None:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                             check=False, env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"^Model name:\s*(.+)$", out, re.MULTILINE)
    return found[1].strip() if found else None


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_line() -> str:
    """'<model>; AVX2 yes, AVX-512 no; N cores, Python X.Y.Z'."""
    model = _lscpu_model() or platform.processor() or "unknown CPU"
    flags = cpu_flags()
    avx512 = sorted(f for f in flags if f.startswith("avx512"))
    return (f"{model}; AVX2 {'yes' if 'avx2' in flags else 'no'}, AVX-512 "
            + (f"yes ({', '.join(avx512[:3])}{', ...' if len(avx512) > 3 else ''})" if avx512
               else "no")
            + f"; {os.cpu_count()} cores, Python {platform.python_version()}")


@contextlib.contextmanager
def hogs(n: int):
    """``n`` busy-looping processes for the length of the block, killed after it."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
