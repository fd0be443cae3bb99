"""Who holds which card: device holders joined to their pods, Jobs and runs.

``correlate`` is pure: it takes the holders the probe found, each holder's pod
UID (``daemon.probes.cgroups``), the pods bound to the node (one list call, made by
the caller) and the memory of when each card pod was first seen idle, and
returns one row per holder plus one per phantom pod:

- an **orphan** is a holder in no pod, in a pod that no longer exists, or in
  a pod that requests no cards: device files the scheduler cannot account for;
- a **phantom** is a pod that was allocated cards but whose processes have
  held no device file for longer than ``phantom_after`` seconds: cards nobody
  uses and nobody else can have.

Without Kubernetes (``pods`` is None) rows carry no pod and nothing is marked.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from daemon.probes import cgroups
from daemon.probes.cgroups import UNREADABLE
from daemon.probes.host_reading import HostReading

# daemon.launchers.k8s (cluster, jobspec) is imported where a pod is read: without Kubernetes
# (`rngdctl cards` on a local host) no pod is, and its regexes, dataclasses and hashlib
# cost that command's start-up about 14 ms (issue 27).

#: Seconds a card pod may hold no device file before it is reported as a phantom.
PHANTOM_AFTER = 600.0

_CARD = re.compile(r"npu(\d+)")


def cards_of(files) -> tuple[str, ...]:
    """The cards a holder's device files belong to (``/dev/rngd/npu1pe0`` -> ``npu1``)."""
    found = set()
    for path in files:
        name = path.rsplit("/", 1)[-1]
        match = _CARD.search(name)
        found.add(f"npu{match.group(1)}" if match else name)
    return tuple(sorted(found, key=lambda c: (len(c), c)))


@dataclass(frozen=True)
class HolderRow:
    """One device holder (``pid`` set) or one phantom pod (``pid`` None)."""

    node: str | None
    cards: tuple[str, ...]
    pid: int | None
    user: str
    command: str
    pod: str | None = None  # namespace/name
    job: str | None = None
    run: int | None = None
    home: str | None = None  # the rngdctl home the run is of (its pod's instance label)
    started: float | None = None  # the process's start (holder) or when the pod went idle
    orphan: str | None = None  # why the holder is an orphan
    phantom: bool = False
    files: tuple[str, ...] = ()
    pod_note: str | None = None  # why no pod is named (cgroup unreadable, API down)

    @property
    def mark(self) -> str:
        return "phantom" if self.phantom else "orphan" if self.orphan else ""

    def age(self, now: float) -> float | None:
        return None if self.started is None else max(0.0, now - self.started)

    def ours(self, runs, home: str) -> bool:
        """Whether its pod is one of ``runs`` of the home ``home`` (a run id alone is not
        enough: two homes sharing a namespace both have a run 1)."""
        return self.run is not None and self.run in runs and self.home == home

    def as_dict(self) -> dict:
        d = asdict(self)
        d["cards"] = list(self.cards)
        d["files"] = list(self.files)
        d["mark"] = self.mark
        return d

    @classmethod
    def from_dict(cls, d: dict) -> HolderRow:
        """A row as stored in a sample (older samples have only pid, user, cmdline, files)."""
        files = tuple(d.get("files") or ())
        return cls(node=d.get("node"), cards=tuple(d.get("cards") or cards_of(files)),
                   pid=d.get("pid"), user=str(d.get("user", "?")),
                   command=str(d.get("command", d.get("cmdline", ""))), pod=d.get("pod"),
                   job=d.get("job"), run=d.get("run"), home=d.get("home"),
                   started=d.get("started"),
                   orphan=d.get("orphan"), phantom=bool(d.get("phantom")), files=files,
                   pod_note=d.get("pod_note"))


@dataclass(frozen=True)
class Correlation:
    rows: tuple[HolderRow, ...]
    #: pod key -> when it was first seen holding cards with no device file open
    #: (the memory to keep for the next call).
    idle_since: dict[str, float] = field(default_factory=dict)

    @property
    def orphans(self) -> tuple[HolderRow, ...]:
        return tuple(r for r in self.rows if r.orphan)

    @property
    def phantoms(self) -> tuple[HolderRow, ...]:
        return tuple(r for r in self.rows if r.phantom)

    def pod_of(self, pid: int) -> str | None:
        return next((r.pod for r in self.rows if r.pid == pid), None)


def _meta(pod: dict) -> dict:
    return pod.get("metadata") or {}


def pod_key(pod: dict) -> str:
    """The pod's UID, else namespace/name (emulators and old objects may lack a UID)."""
    meta = _meta(pod)
    return meta.get("uid") or f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"


def _pod_name(pod: dict) -> str:
    meta = _meta(pod)
    return f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"


def pod_job(pod: dict) -> str | None:
    """The Job that owns a pod: its owner reference, else the Job labels."""
    from daemon.launchers.k8s import jobspec

    meta = _meta(pod)
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "Job":
            return owner.get("name")
    labels = meta.get("labels") or {}
    return (labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
            or labels.get(jobspec.JOB_LABEL))


def pod_run(pod: dict) -> int | None:
    """The rngdctl run a pod belongs to, when rngdctl made it."""
    from daemon.launchers.k8s import jobspec

    labels = _meta(pod).get("labels") or {}
    if labels.get(jobspec.MANAGED_BY) != jobspec.MANAGER:
        return None
    try:
        return int(labels.get(jobspec.RUN_LABEL))
    except (TypeError, ValueError):
        return None


def pod_home(pod: dict) -> str | None:
    """The rngdctl home a pod of ours belongs to (``Store.home_id``), when it says."""
    from daemon.launchers.k8s import jobspec

    labels = _meta(pod).get("labels") or {}
    if labels.get(jobspec.MANAGED_BY) != jobspec.MANAGER:
        return None
    return labels.get(jobspec.INSTANCE_LABEL)


def _holder_row(holder, node, uid, pods_by_uid, have_pods: bool, api_note: str | None):
    base = {"node": node, "cards": cards_of(holder.files), "pid": holder.pid,
            "user": holder.user, "command": holder.cmdline, "started": holder.started,
            "files": tuple(holder.files)}
    if not have_pods:
        return HolderRow(**base, pod_note=api_note)
    if uid == UNREADABLE:
        return HolderRow(**base, pod_note="its cgroup could not be read")
    if uid is None:
        return HolderRow(**base, orphan="in no pod")
    pod = pods_by_uid.get(uid)
    if pod is None:
        return HolderRow(**base, orphan=f"pod {uid} no longer exists")
    from daemon.launchers.k8s import cluster

    row = {**base, "pod": _pod_name(pod), "job": pod_job(pod), "run": pod_run(pod),
           "home": pod_home(pod)}
    if cluster.pod_cards(pod) == 0:
        return HolderRow(**row, orphan=f"pod {_pod_name(pod)} requests no cards")
    return HolderRow(**row)


def correlate(host: HostReading, *, node: str | None, pods: list[dict] | None,
              uids: dict[int, str | None], idle_since: dict[str, float], now: float,
              phantom_after: float = PHANTOM_AFTER, api_note: str | None = None) -> Correlation:
    """Join holders to pods; mark orphans and phantoms. No I/O.

    ``pods``: the pods bound to ``node``, or None without Kubernetes (or when
    the API did not answer: ``api_note`` says why). ``uids``: pid -> pod UID
    from ``daemon.probes.cgroups.pod_uids``. ``idle_since``: the returned memory of
    the previous call. Phantoms are reported only from a complete reading:
    a pod whose processes could not be inspected is not known to be idle.
    """
    have_pods = pods is not None
    if not have_pods:
        rows = [_holder_row(h, node, uids.get(h.pid), {}, False, api_note) for h in host.holders]
        # Without a pod list nothing is known about idle pods: keep the memory as it is.
        return Correlation(tuple(rows), dict(idle_since))
    from daemon.launchers.k8s import cluster

    live = [p for p in pods if not cluster.is_terminated(p)]
    by_uid = {_meta(p).get("uid"): p for p in live if _meta(p).get("uid")}
    rows = [_holder_row(h, node, uids.get(h.pid), by_uid, True, api_note)
            for h in host.holders]
    held = {uids.get(h.pid) for h in host.holders}
    memory: dict[str, float] = {}
    for pod in live:
        cards = cluster.pod_cards(pod)
        uid = _meta(pod).get("uid")
        if not cards or (uid and uid in held):
            continue
        key = pod_key(pod)
        since = idle_since.get(key, now)
        memory[key] = since
        if host.complete and now - since > phantom_after:
            rows.append(HolderRow(
                node=node, cards=(f"{cards} card{'s' if cards != 1 else ''}",), pid=None,
                user="–", command="no process holds a device file since it was seen idle",
                pod=_pod_name(pod), job=pod_job(pod), run=pod_run(pod), home=pod_home(pod),
                started=since, phantom=True))
    return Correlation(tuple(rows), memory)


def describe(row: HolderRow) -> str:
    """One line for a gate's detail: who holds what, naming the pod."""
    text = f"pid {row.pid} {row.command[:60]} ({row.user})"
    if row.pod:
        text += f" in pod {row.pod}" + (f" (run {row.run})" if row.run is not None else "")
    text += f" holds {', '.join(row.cards[:4]) or '?'}"
    if row.orphan:
        text += f" (orphan: {row.orphan})"
    return text


def report(host: HostReading, launcher, store, *, now: float,
           phantom_after: float = PHANTOM_AFTER, proc: str = "/proc") -> Correlation:
    """The holder report now: the launcher's pod list (one call), cgroups, the idle memory.

    The memory of idle pods is read from and written back to the store, so a
    phantom is found across daemon restarts and by ``rngdctl holders`` alike.
    """
    node, pods, note = launcher.node_pods()
    uids = cgroups.pod_uids([h.pid for h in host.holders], proc) if pods is not None else {}
    memory_key = node or "?"
    found = correlate(host, node=node, pods=pods, uids=uids,
                      idle_since=store.idle_pods(memory_key), now=now,
                      phantom_after=phantom_after, api_note=note)
    if pods is not None:
        store.set_idle_pods(memory_key, found.idle_since)
    return found
