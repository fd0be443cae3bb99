"""Readings from Kubernetes objects (plain dicts): cards free, image present, pod state.

No I/O here: the launcher fetches the objects, these functions read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.launchers.k8s.jobspec import CARD_RESOURCES, RESOURCE

#: The device plugin's partitioned resources and their units in one card: an RNGD card's 8
#: cores and 48 GB cut into 4 of 2 cores and 12 GB, or 2 of 4 cores and 24 GB.
PARTITIONS = {"furiosa.ai/rngd-2core.12gb": 4, "furiosa.ai/rngd-4core.24gb": 2}
#: Furiosa's DRA driver: its ResourceSlices publish the cards instead of the device plugin.
DRA_DRIVER = "npu.furiosa.ai"

#: Waiting reasons that mean the image cannot be pulled (the pod stays Pending
#: forever, holding its cards, and no Job failure policy ever fires).
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
#: Waiting reasons that will not fix themselves (a missing ConfigMap, Secret, ...).
CONFIG_ERRORS = ("CreateContainerConfigError",)
#: Pod status reasons of a pod that was put out rather than failing on its own.
EVICTION_REASONS = ("Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated",
                    "UnexpectedAdmissionError", "Preempting")
#: The kubelet refused the pod at admission: status.reason is ``OutOf<resource>``
#: (``OutOfcpu``, ``OutOfmemory``, ``OutOffuriosa.ai/rngd`` when the card race was lost).
ADMISSION_REJECT_PREFIX = "OutOf"


def _quantity(value) -> int:
    """A whole-card quantity ("2", 2, "2000m") as an int."""
    if value is None:
        return 0
    text = str(value).strip()
    if text.endswith("m"):
        return int(text[:-1] or 0) // 1000
    try:
        return int(float(text))
    except ValueError:
        return 0


def card_resource(node: dict, configured: str | None = None) -> str | None:
    """The node's card resource: ``configured`` (``[k8s] card_resource``) when set, else the
    one of ``furiosa.ai/rngd``, ``rngd-s``, ``rngd-max`` its device plugin advertises."""
    if configured:
        return configured
    alloc = ((node.get("status") or {}).get("allocatable") or {})
    return next((r for r in CARD_RESOURCES if r in alloc), None)


def allocatable_cards(node: dict, configured: str | None = None) -> int | None:
    resource = card_resource(node, configured)
    alloc = ((node.get("status") or {}).get("allocatable") or {})
    return _quantity(alloc[resource]) if resource in alloc else None


def partitions(node: dict) -> dict[str, int]:
    """The partitioned card resources the node offers, and how many units of each."""
    alloc = ((node.get("status") or {}).get("allocatable") or {})
    found = {r: _quantity(alloc[r]) for r in PARTITIONS if r in alloc}
    return {r: n for r, n in found.items() if n > 0}


def no_cards_message(node: dict, configured: str | None = None) -> str:
    """Why a node shows no cards: the resource looked for; its cards cut into partitions,
    or the DRA alternative."""
    name = (node.get("metadata") or {}).get("name", "?")
    wanted = configured or ", ".join(CARD_RESOURCES)
    parts = partitions(node)
    if parts:
        offered = "; ".join(f"{n} {r} ({n / PARTITIONS[r]:g} cards)" for r, n in parts.items())
        return (f"node {name}'s cards are partitioned: {offered}; a run's --cards are whole "
                f"cards ({wanted}): set [k8s] card_resource = \"{next(iter(parts))}\" to "
                f"count them in that partition unit, or serve whole cards on this node")
    return (f"node {name} has no allocatable {wanted} (Furiosa device plugin not running? "
            f"the DRA driver publishes {DRA_DRIVER} ResourceSlices instead, and rngdctl "
            "places no DRA claims: set [k8s] card_resource or run the device plugin; "
            "rngdctl doctor checks for them)")


def container_cards(container: dict, resource: str | None = None) -> int:
    """Cards a container asks for: of ``resource``, or of any RNGD card resource."""
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    # For extended resources the API server copies limits into requests.
    return sum(_quantity(requests.get(r, limits.get(r)))
               for r in ((resource,) if resource else CARD_RESOURCES))


def pod_cards(pod: dict, resource: str | None = None) -> int:
    """The cards a pod holds: max(sum over containers, max over init containers)."""
    spec = pod.get("spec") or {}
    main = sum(container_cards(c, resource) for c in spec.get("containers") or [])
    init = max((container_cards(c, resource) for c in spec.get("initContainers") or []),
               default=0)
    return max(main, init)


def is_terminated(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def cards_free(node: dict, pods: list[dict], configured: str | None = None) -> tuple[int, str]:
    """Allocatable cards minus what the node's non-terminated pods request, and why."""
    name = (node.get("metadata") or {}).get("name", "?")
    resource = card_resource(node, configured)
    total = allocatable_cards(node, resource)
    if total is None:
        return 0, no_cards_message(node, configured)
    holders = []
    used = 0
    for pod in pods:
        if is_terminated(pod):
            continue
        n = pod_cards(pod, resource)
        if n:
            used += n
            meta = pod.get("metadata") or {}
            holders.append(f"{meta.get('namespace', '?')}/{meta.get('name', '?')}={n}")
    free = max(0, total - used)
    detail = f"node {name}: {total} allocatable, {used} requested"
    if resource != RESOURCE:  # name the resource where it is not the usual one
        detail += f" {resource}"
    if holders:
        detail += f" ({', '.join(holders[:4])}{' ...' if len(holders) > 4 else ''})"
    return free, detail


def _normal(ref: str) -> str:
    """An image reference in full form: registry/repository[:tag][@digest]."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
    else:
        name, digest = ref, ""
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name if '/' in name else 'library/' + name}"
    if not digest and not re.search(r":[^/]+$", name):
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def image_listed(node: dict, image: str) -> bool:
    """Whether ``image`` is among the node's ``status.images`` (a capped list: a hint)."""
    want = _normal(image)
    want_digest = want.split("@", 1)[1] if "@" in want else None
    for entry in (node.get("status") or {}).get("images") or []:
        for ref in entry.get("names") or []:
            have = _normal(ref)
            if have == want:
                return True
            if want_digest and have.endswith("@" + want_digest):
                return True
    return False


# === pods ====================================================================


@dataclass(frozen=True)
class PodView:
    """What matters about a pod's state, read from its status."""

    name: str
    uid: str | None
    phase: str
    reason: str | None  # pod-level status.reason (Evicted, DeadlineExceeded, ...)
    message: str | None
    waiting: str | None  # the first container's waiting reason
    waiting_message: str | None
    running: bool
    terminated: str | None  # terminated reason (Completed, Error, OOMKilled, ...)
    exit_code: int | None
    image_id: str | None
    node: str | None
    disrupted: str | None  # the DisruptionTarget condition's reason, if any
    deleting: bool

    @property
    def started(self) -> bool:
        """The container ran (its log exists)."""
        return self.running or self.terminated is not None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed") or (
            self.terminated is not None and not self.running)


def pod_view(pod: dict, container: str | None = None) -> PodView:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    mine = next((s for s in statuses if container is None or s.get("name") == container),
                statuses[0] if statuses else {})
    state = mine.get("state") or {}
    waiting = state.get("waiting") or {}
    terminated = state.get("terminated")
    disrupted = next((c.get("reason") for c in status.get("conditions") or []
                      if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    return PodView(
        name=meta.get("name", "?"),
        uid=meta.get("uid"),
        phase=status.get("phase") or "Pending",
        reason=status.get("reason"),
        message=status.get("message"),
        waiting=waiting.get("reason") if "waiting" in state else None,
        waiting_message=waiting.get("message"),
        running="running" in state,
        terminated=(terminated.get("reason") or "Terminated") if terminated else None,
        exit_code=terminated.get("exitCode") if terminated else None,
        image_id=mine.get("imageID") or None,
        node=(pod.get("spec") or {}).get("nodeName"),
        disrupted=disrupted,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def admission_rejected(view: PodView) -> bool:
    """The node refused the pod for want of some resource (any ``OutOf<resource>``)."""
    return (view.reason or "").startswith(ADMISSION_REJECT_PREFIX)


def newest(pods: list[dict]) -> dict | None:
    """The most recently created pod (a Job with backoffLimit 0 has one, but be sure)."""
    if not pods:
        return None
    return max(pods, key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "",
                                    (p.get("metadata") or {}).get("name") or ""))


def job_condition(job: dict) -> tuple[str, str | None, str | None] | None:
    """("Complete" | "Failed", reason, message) once the Job has finished, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"], cond.get("reason"), cond.get("message")
    return None
