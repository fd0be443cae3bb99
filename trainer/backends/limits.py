"""One job in a forked child with a time limit: for the op report's compiles.

furiosa-torch's compiler can run for many minutes at one shape, hang or panic; the op report
(trainer/backends/op_report.py) runs each compile through ``in_child`` so that none of this stalls
or ends the report. The child is forked (the traced graph is already in memory: nothing to pickle),
sends its verdict down a pipe as JSON, and is killed past the limit.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

from trainer.backends.furiosa_torch import one_line


def in_child(job, limit_s: float) -> tuple[str, str]:
    """``job()``, which returns (status, why), run in a forked child for at most ``limit_s``
    seconds: a compile of the package can run for many minutes (or hang), and neither may
    stall the report. Past the limit the child is killed: ("TIMEOUT", "timed out after N s").
    The child also ends itself a little after the limit, and with its parent."""
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one compile, its verdict down the pipe, then out at once
        os.close(read)
        _die_with_parent()
        signal.alarm(int(limit_s) + 30)
        try:
            result = tuple(job())
        except BaseException as exc:  # noqa: BLE001 - whatever the package raised is the verdict
            result = ("ERROR", one_line(exc))
        data = json.dumps(result).encode()
        while data:
            data = data[os.write(write, data):]
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + limit_s
    chunks: list[bytes] = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                _kill(pid)
                return "TIMEOUT", f"timed out after {limit_s:g} s"
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    except BaseException:
        _kill(pid)
        raise
    finally:
        os.close(read)
    _, code = os.waitpid(pid, 0)
    if not chunks:
        how = (f"killed by signal {os.WTERMSIG(code)}" if os.WIFSIGNALED(code)
               else f"exit {os.WEXITSTATUS(code)}")
        return "ERROR", f"the compile's process ended without a verdict ({how})"
    status, why = json.loads(b"".join(chunks))
    return status, why


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when the report's process dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass
