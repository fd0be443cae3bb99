"""Which Kubernetes pod a process belongs to, from its ``/proc/PID/cgroup``.

The kubelet puts every container of a pod under a cgroup named after the
pod's UID. The forms seen on nodes:

- cgroup v1 or v2, cgroupfs driver: ``.../kubepods/burstable/pod<uid>/<container>``
  (guaranteed pods sit directly under ``kubepods/``);
- cgroup v1 or v2, systemd driver:
  ``.../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
  cri-containerd-<id>.scope``, where the UID's dashes are written as underscores.

A v1 file has one line per hierarchy (``12:pids:/kubepods/...``), a v2 file one
line (``0::/kubepods.slice/...``); any line naming a pod is enough. This is the
one place that parses them: the device-holder report and the k8s launcher's
own-pod check both call it.
"""

from __future__ import annotations

import re
from pathlib import Path

# A pod UID is an RFC 4122 UUID; the systemd driver writes it with underscores.
_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?(?=/|$)")

#: The cgroup file could not be read (the process ended, or it is not ours to read).
UNREADABLE = "unreadable"


def pod_uid(cgroup_text: str) -> str | None:
    """The pod UID a cgroup file names (dashed, lower case), or None for a process in no pod."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1].strip()
        if "kubepods" not in path:
            continue
        found = _POD.findall(path.lower())
        if found:
            return found[-1].replace("_", "-")
    return None


def read_pod_uid(pid: int, proc: str = "/proc") -> str | None:
    """The pod UID of ``pid``; None when in no pod; ``UNREADABLE`` when the file cannot be read."""
    try:
        text = (Path(proc) / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return UNREADABLE
    return pod_uid(text)


def pod_uids(pids, proc: str = "/proc") -> dict[int, str | None]:
    """``read_pod_uid`` for each pid."""
    return {pid: read_pod_uid(pid, proc) for pid in pids}
