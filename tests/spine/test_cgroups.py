"""A process's pod UID from /proc/PID/cgroup, in every layout a node writes."""

from __future__ import annotations

import pytest

from daemon.probes.cgroups import UNREADABLE, pod_uid, pod_uids, read_pod_uid

UID = "0e7b9b1c-5d2a-4f1e-9c3b-7a6d5e4f3a21"
UNDERSCORED = UID.replace("-", "_")

LAYOUTS = {
    "v1 cgroupfs, burstable": (
        f"12:pids:/kubepods/burstable/pod{UID}/3f0a9b\n"
        f"11:devices:/kubepods/burstable/pod{UID}/3f0a9b\n1:name=systemd:/\n"),
    "v1 cgroupfs, guaranteed": f"4:memory:/kubepods/pod{UID}/3f0a9b\n",
    "v1 systemd": (
        "11:cpuset:/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UNDERSCORED}.slice/docker-3f0a9b.scope\n"),
    "v2 systemd": (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UNDERSCORED}.slice/cri-containerd-3f0a9b.scope\n"),
    "v2 systemd, guaranteed": f"0::/kubepods.slice/kubepods-pod{UNDERSCORED}.slice/cri-x\n",
    "v2 cgroupfs": f"0::/kubepods/besteffort/pod{UID}/3f0a9b\n",
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_pod_uid_is_read_from_every_cgroup_layout(layout):
    assert pod_uid(LAYOUTS[layout]) == UID


@pytest.mark.parametrize("text", [
    "0::/user.slice/user-1000.slice/session-3.scope\n",
    "12:pids:/system.slice/containerd.service\n0::/\n",
    # A pod-like name outside the kubelet's tree is not a pod.
    f"0::/system.slice/pod{UID}.scope\n",
    "",
])
def test_a_process_outside_kubepods_is_in_no_pod(text):
    assert pod_uid(text) is None


def test_a_generated_proc_tree_gives_each_pid_its_pod_or_none(tmp_path):
    for pid, text in [(10, LAYOUTS["v1 cgroupfs, burstable"]), (11, LAYOUTS["v2 systemd"]),
                      (12, "0::/user.slice/session-3.scope\n")]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    assert pod_uids([10, 11, 12, 13], str(tmp_path)) == {
        10: UID, 11: UID, 12: None, 13: UNREADABLE}
    assert read_pod_uid(13, str(tmp_path)) == UNREADABLE
