"""Holder to pod: a generated /proc tree (both cgroup layouts) joined to kmock's pods."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import uuid

import pytest
from k8s_emulator import NODE, NS

from daemon.probes import holders
from daemon.probes.host_reading import read_host

RUN_UID = str(uuid.uuid4())
NOCARD_UID = str(uuid.uuid4())
IDLE_UID = str(uuid.uuid4())
GONE_UID = str(uuid.uuid4())


def _process(proc, pid: int, cgroup: str, cmd: bytes = b"python\0train.py\0",
             device: str = "/dev/rngd/npu0pe0") -> None:
    d = proc / str(pid)
    (d / "fd").mkdir(parents=True)
    os.symlink(device, d / "fd" / "3")
    (d / "cmdline").write_bytes(cmd)
    (d / "cgroup").write_text(cgroup)


def _v2(uid: str) -> str:
    return ("0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-ab.scope\n")


def _v1(uid: str) -> str:
    return f"12:pids:/kubepods/besteffort/pod{uid}/ab\n11:devices:/kubepods/besteffort/pod{uid}/ab\n"


def _pod(cluster, name: str, uid: str, *, cards: int, namespace: str = NS,
         labels: dict | None = None, owner: str | None = None) -> None:
    meta = {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner, "apiVersion": "batch/v1"}]
    resources = {"limits": {"furiosa.ai/rngd": str(cards)}} if cards else {}
    cluster.put("v1/pods", {"metadata": meta, "spec": {"nodeName": NODE, "containers": [
        {"name": "c", "resources": resources}]}, "status": {"phase": "Running"}},
        namespace=namespace)


@pytest.fixture
def node(cluster, proc):
    """rngd-node-1 with a run's pod (v2 cgroup), a card-less pod (v1), an idle card pod,
    a process in no pod and one whose pod is gone."""
    _pod(cluster, "rngd-7-a0-abc12", RUN_UID, cards=2, owner="rngd-7-a0",
         labels={"app.kubernetes.io/managed-by": "rngdctl", "rngdctl.io/run-id": "7"})
    _pod(cluster, "notebook", NOCARD_UID, cards=0, namespace="research")
    _pod(cluster, "serving-0", IDLE_UID, cards=1, namespace="inference")
    _process(proc, 100, _v2(RUN_UID))
    _process(proc, 200, "0::/user.slice/user-1000.slice/session-3.scope\n",
             cmd=b"python\0bench.py\0", device="/dev/rngd/npu1pe0")
    _process(proc, 300, _v1(NOCARD_UID), device="/dev/rngd/npu2mgmt")
    _process(proc, 400, _v2(GONE_UID), device="/dev/rngd/npu3pe4-7")
    return proc


def _rows(found) -> dict:
    return {r.pid if r.pid is not None else r.pod: r for r in found.rows}


def test_each_holder_is_mapped_to_its_pod_job_and_run(node, launcher, store, config):
    found = holders.report(read_host(proc=str(node)), launcher, store, now=1000.0,
                           proc=str(node))
    row = _rows(found)[100]
    assert (row.node, row.cards, row.pod, row.job, row.run) == (
        NODE, ("npu0",), f"{NS}/rngd-7-a0-abc12", "rngd-7-a0", 7)
    assert row.mark == "" and row.command == "python train.py"


def test_orphans_are_a_process_in_no_pod_a_gone_pod_and_a_pod_without_cards(
        node, launcher, store):
    found = holders.report(read_host(proc=str(node)), launcher, store, now=1000.0,
                           proc=str(node))
    rows = _rows(found)
    assert rows[200].orphan == "in no pod" and rows[200].cards == ("npu1",)
    assert rows[300].orphan == "pod research/notebook requests no cards"
    assert rows[300].pod == "research/notebook"
    assert rows[400].orphan == f"pod {GONE_UID} no longer exists"
    assert sorted(r.pid for r in found.orphans) == [200, 300, 400]


def test_a_card_pod_idle_past_phantom_after_is_a_phantom_remembered_across_launchers(
        node, launcher, store, config, home):
    from daemon.launchers.k8s.launcher import K8sLauncher
    from daemon.run.ingest import Ingest

    host = read_host(proc=str(node))
    first = holders.report(host, launcher, store, now=1000.0, phantom_after=600,
                           proc=str(node))
    assert first.phantoms == ()  # first seen idle now: not yet
    again = K8sLauncher(home=home, store=store, config=config, ingest=Ingest(store),
                        proc=str(node))  # a restarted daemon: the memory is in the store
    try:
        before = holders.report(host, again, store, now=1599.0, phantom_after=600,
                                proc=str(node))
        after = holders.report(host, again, store, now=1601.0, phantom_after=600,
                               proc=str(node))
    finally:
        again.close()
    assert before.phantoms == ()
    [phantom] = after.phantoms
    assert phantom.pod == "inference/serving-0" and phantom.pid is None
    assert phantom.age(1601.0) == 601.0 and phantom.mark == "phantom"


def test_a_pod_that_takes_its_device_files_again_is_no_longer_a_phantom(node, launcher, store,
                                                                        proc):
    host = read_host(proc=str(node))
    holders.report(host, launcher, store, now=1000.0, phantom_after=600, proc=str(node))
    _process(proc, 500, _v1(IDLE_UID), device="/dev/rngd/npu4pe0")
    busy = holders.report(read_host(proc=str(node)), launcher, store, now=2000.0,
                          phantom_after=600, proc=str(node))
    assert busy.phantoms == ()
    assert _rows(busy)[500].pod == "inference/serving-0"
    # Idle again: the clock starts over.
    (proc / "500" / "fd" / "3").unlink()
    idle = holders.report(read_host(proc=str(node)), launcher, store, now=2100.0,
                          phantom_after=600, proc=str(node))
    assert idle.phantoms == ()


def test_with_the_api_down_holders_are_listed_without_pods_and_nothing_is_marked(
        node, launcher, store, dead_api):
    found = holders.report(read_host(proc=str(node)), launcher, store, now=1000.0,
                           proc=str(node))
    assert sorted(r.pid for r in found.rows) == [100, 200, 300, 400]
    assert not found.orphans and not found.phantoms
    assert all(r.pod is None and "unavailable" in r.pod_note for r in found.rows)


def test_the_device_idle_gate_names_the_pod_that_holds_a_card(node, launcher, store, config,
                                                              home, submit):
    from daemon.scheduling.loop import Daemon

    run_id = submit(cards=1)
    launcher.startup()
    for other in (200, 300, 400):  # one holder, so the gate's first holder is known
        shutil.rmtree(node / str(other))
    Daemon(home, store, config, launcher, probe=lambda: read_host(proc=str(node)),
           proc=str(node)).tick(now=1000.0)
    [check] = store.gate_checks(run_id=run_id)
    idle = next(g for g in check["gates"] if g["name"] == "device_idle")
    assert idle["verdict"] == "fail"
    me = pwd.getpwuid(os.getuid()).pw_name
    assert idle["detail"].startswith(
        f"pid 100 python train.py ({me}) in pod {NS}/rngd-7-a0-abc12 (run 7) holds npu0")
    # The sample the TUI reads carries the same rows.
    sample = store.latest_sample()
    assert [(h["pid"], h["pod"], h["run"]) for h in sample["holders"]] == [
        (100, f"{NS}/rngd-7-a0-abc12", 7)]


def test_rngdctl_holders_json_lists_every_row_with_its_mark(node, home, rngdctl):
    home.config_path.write_text(f'[daemon]\nlauncher = "k8s"\n\n[k8s]\nnamespace = "{NS}"\n'
                                f'node = "{NODE}"\nretries = 0\nrequest_timeout = 2.0\n')
    code, out, err = rngdctl("holders", "--json", "--proc", str(node))
    assert code == 0, err
    found = json.loads(out)
    by_pid = {r["pid"]: r for r in found["holders"]}
    assert by_pid[100]["pod"] == f"{NS}/rngd-7-a0-abc12" and by_pid[100]["run"] == 7
    assert by_pid[200]["mark"] == "orphan" and found["orphans"] == 3
    code, out, err = rngdctl("holders", "--proc", str(node))
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split() == ["NODE", "CARD", "PID", "USER", "AGE", "POD", "JOB", "RUN",
                              "MARK", "COMMAND"]
    assert any("bench.py" in line and "orphan (in no pod)" in line for line in lines)
