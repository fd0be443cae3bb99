"""The Job, the compile Job and the pre-pull pod, built as data (dicts), never as text.

Names follow DNS-1123 (lower-case letters, digits and '-', at most 63
characters, starting and ending with a letter or digit); label values are
cut the same way. Every object carries its home's id (``Store.home_id``): in
the label ``app.kubernetes.io/instance`` whole, in the name its first
``HOME_IN_NAME`` characters, so that two homes sharing a namespace never take
each other's Jobs and pods (``ours``).
"""

from __future__ import annotations

import hashlib
import re

from daemon.errors import ConfigError

#: The Furiosa device plugin names the resource after the card's arch, one unit a card.
CARD_RESOURCES = ("furiosa.ai/rngd", "furiosa.ai/rngd-s", "furiosa.ai/rngd-max")
RESOURCE = CARD_RESOURCES[0]  # the usual one; a node's own is read (cluster.card_resource)
SECCOMP_PROFILES = ("Unconfined", "RuntimeDefault", "")
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "rngdctl"
RUN_LABEL = "rngdctl.io/run-id"
STAGE_LABEL = "rngdctl.io/stage"
JOB_LABEL = "rngdctl.io/job"
#: The home a Job, pod or Lease belongs to: its whole ``Store.home_id``.
INSTANCE_LABEL = "app.kubernetes.io/instance"
#: Characters of the home's id in a name: enough that two homes' names do not meet (a
#: meeting is a 409 that the label then refuses, never an adoption).
HOME_IN_NAME = 8
HOSTNAME_LABEL = "kubernetes.io/hostname"
CONTAINER = "trainer"

#: Stages: what a Job or pod of ours is for.
TRAIN, COMPILE, PREPULL = "train", "compile", "prepull"

MAX_NAME = 63
_INVALID = re.compile(r"[^a-z0-9-]+")


def dns_name(text: str, limit: int = MAX_NAME) -> str:
    """``text`` as a DNS-1123 label: lower case, '-' for anything else, cut to ``limit``."""
    name = _INVALID.sub("-", text.lower())
    name = re.sub(r"-{2,}", "-", name).strip("-")[:limit].strip("-")
    return name or "x"


def job_name(run: dict, stage: str = TRAIN, *, home: str) -> str:
    """``rngd-<id>-a<attempt>-<home>[-compile][-<run name>]``, at most 63 characters."""
    head = f"rngd-{run['id']}-a{run.get('attempts') or 0}-{home[:HOME_IN_NAME]}"
    if stage != TRAIN:
        head += f"-{stage}"
    name = run.get("name") or (run.get("config") or {}).get("name")
    if not name:
        return head
    room = MAX_NAME - len(head) - 1
    slug = dns_name(name, room) if room > 0 else ""
    return f"{head}-{slug}" if slug and slug != "x" else head


def prepull_name(image: str, node: str, *, home: str) -> str:
    """One pre-pull pod per (image, node) of a home: a stable name, so a second one is
    never made."""
    digest = hashlib.sha256(f"{node}\0{image}\0{home}".encode()).hexdigest()[:10]
    tail = dns_name(image.rsplit("/", 1)[-1], 30)
    return dns_name(f"rngd-prepull-{tail}-{digest}")


def labels(run_id: int | None, stage: str, name: str, *, home: str) -> dict[str, str]:
    out = {MANAGED_BY: MANAGER, INSTANCE_LABEL: home, STAGE_LABEL: stage, JOB_LABEL: name}
    if run_id is not None:
        out[RUN_LABEL] = str(run_id)
    return out


def selector(home: str, more: dict[str, str] | None = None) -> dict[str, str]:
    """The labels that select a home's objects (and ``more``)."""
    return {MANAGED_BY: MANAGER, INSTANCE_LABEL: home, **(more or {})}


def ours(obj: dict | None, home: str) -> bool:
    """Whether a Job, pod or Lease is this home's: rngdctl's, with this home's id."""
    found = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return found.get(MANAGED_BY) == MANAGER and found.get(INSTANCE_LABEL) == home


def another_homes(obj: dict | None, home: str) -> bool:
    """Whether an object of ours carries another home's id. One without an id was made
    before homes had one, by a name this home stored: its name is what matches it."""
    found = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return found.get(INSTANCE_LABEL, home) != home


def node_affinity(node: str) -> dict:
    """The pod goes to the node named ``node``: a match on the Node's ``metadata.name``.

    Not a nodeSelector on ``kubernetes.io/hostname``: that label may differ from the
    name (the pod is then Unschedulable for ever), and a label value has at most 63
    characters where a node name has 253 (the Job is then refused, 422).
    """
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}


def pinned_node(pod_spec: dict) -> str | None:
    """The node a pod spec pins its pod to (``node_affinity``; a Job made before it, its
    hostname nodeSelector)."""
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and len(field.get("values") or []) == 1:
                return field["values"][0]
    return (pod_spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)


def _env(k8s, run_id: int) -> list[dict]:
    if not isinstance(k8s.env, dict):
        raise ConfigError("config.toml: [k8s] env must be a table of NAME = \"value\"")
    env = [{"name": str(k), "value": str(v)} for k, v in sorted(k8s.env.items())]
    env.append({"name": "RNGDCTL_RUN_ID", "value": str(run_id)})
    env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    return env


def volumes(k8s, *, where: str = "config.toml: [k8s]") -> tuple[list[dict], list[dict]]:
    """``[k8s] volumes`` entries into (pod volumes, container mounts).

    Each entry is a table: ``name``, ``mount`` (path in the container), one of
    ``host_path`` or ``pvc`` (a claim name), and optional ``read_only``. Also called
    when the config is read (daemon/home.py), with ``where`` naming the file.
    """
    pod_volumes, mounts = [], []
    if k8s.volumes is not None and not isinstance(k8s.volumes, list):
        raise ConfigError(f"{where} volumes must be a list of tables")
    for i, entry in enumerate(k8s.volumes or []):
        where_i = f"{where} volumes[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where_i} must be a table with name, mount and host_path or pvc")
        name, mount = entry.get("name"), entry.get("mount")
        if not name or not mount:
            raise ConfigError(f"{where_i} needs a name and a mount path")
        if bool(entry.get("host_path")) == bool(entry.get("pvc")):
            raise ConfigError(f"{where_i} needs exactly one of host_path or pvc")
        unknown = set(entry) - {"name", "mount", "host_path", "pvc", "read_only"}
        if unknown:
            raise ConfigError(f"{where_i}: unknown key(s) {', '.join(sorted(unknown))}")
        vname = dns_name(str(name))
        if entry.get("host_path"):
            source = {"hostPath": {"path": str(entry["host_path"])}}
        else:
            source = {"persistentVolumeClaim": {"claimName": str(entry["pvc"])}}
        pod_volumes.append({"name": vname, **source})
        mounts.append({"name": vname, "mountPath": str(mount),
                       "readOnly": bool(entry.get("read_only", False))})
    return pod_volumes, mounts


#: The pod volume that holds the runs' output (``[k8s] output_volume``, a PVC).
OUTPUT_VOLUME = "rngdctl-output"


def output_dir(run: dict, k8s) -> str | None:
    """The trainer's ``--out`` inside the container: ``--out`` as given, else
    ``<output_path>/runs/<id>/model`` on the output volume; None without a volume."""
    out = (run.get("config") or {}).get("out")
    if out:
        return str(out)
    if not k8s.output_volume:
        return None
    return f"{k8s.output_path.rstrip('/')}/runs/{run['id']}/model"


def _output_volume(k8s) -> tuple[list[dict], list[dict]]:
    if not k8s.output_volume:
        return [], []
    if not str(k8s.output_path).startswith("/"):
        raise ConfigError(f"config.toml: [k8s] output_path must be an absolute path, got "
                          f"{k8s.output_path!r}")
    return ([{"name": OUTPUT_VOLUME,
              "persistentVolumeClaim": {"claimName": str(k8s.output_volume)}}],
            [{"name": OUTPUT_VOLUME, "mountPath": str(k8s.output_path), "readOnly": False}])


def _resources(k8s, cards: int, resource: str) -> dict:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if k8s.cpu:
        requests["cpu"] = str(k8s.cpu)
    if k8s.memory:
        requests["memory"] = str(k8s.memory)
        limits["memory"] = str(k8s.memory)
    if cards:
        # Extended resources: requests must equal limits.
        requests[resource] = str(cards)
        limits[resource] = str(cards)
    out: dict = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def job(run: dict, k8s, *, name: str, node: str, image: str, argv: list[str], home: str,
        stage: str = TRAIN, resource: str = RESOURCE, grace_s: float | None = None) -> dict:
    """A ``batch/v1`` Job that runs ``argv`` once on ``node``; the compile stage asks no card.

    ``resource`` is the node's card resource. The pod's seccomp profile is ``[k8s]
    seccomp_profile`` (Unconfined by default: the RNGD driver uses io_uring, which the
    runtime's default profile blocks; Furiosa's own examples run so); empty leaves it unset.
    ``grace_s`` (``[daemon] stop_grace_s``) is the pod's terminationGracePeriodSeconds: a
    delete, the deadline or a drain sends SIGTERM, and the trainer finishes its step and
    writes a checkpoint to the output volume within it.
    """
    config = run["config"]
    cards = int(config["cards"]) if stage == TRAIN else 0
    deadline = int(config.get("deadline") or k8s.default_deadline)
    pod_volumes, mounts = volumes(k8s)
    if stage == TRAIN:
        out_volumes, out_mounts = _output_volume(k8s)
        pod_volumes, mounts = pod_volumes + out_volumes, mounts + out_mounts
    tags = labels(run["id"], stage, name, home=home)
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": k8s.pull_policy,
        "command": list(argv),
        "env": _env(k8s, run["id"]),
        "resources": _resources(k8s, cards, resource),
    }
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: dict = {
        "restartPolicy": "Never",
        "affinity": node_affinity(node),
        # The trainer never calls the API: no token in its pod for it to leak.
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if pod_volumes:
        pod_spec["volumes"] = pod_volumes
    if grace_s is not None:
        pod_spec["terminationGracePeriodSeconds"] = round(grace_s)
    if k8s.service_account:
        pod_spec["serviceAccountName"] = k8s.service_account
    if k8s.seccomp_profile not in SECCOMP_PROFILES:
        raise ConfigError(f"config.toml: [k8s] seccomp_profile must be one of "
                          f"{', '.join(repr(p) for p in SECCOMP_PROFILES)}, "
                          f"got {k8s.seccomp_profile!r}")
    if k8s.seccomp_profile:
        pod_spec["securityContext"] = {"seccompProfile": {"type": k8s.seccomp_profile}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": k8s.namespace, "labels": tags},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": int(k8s.ttl_seconds),
            "template": {"metadata": {"labels": tags}, "spec": pod_spec},
        },
    }


def prepull_pod(k8s, *, name: str, node: str, image: str, run_id: int | None,
                home: str) -> dict:
    """A pod that asks for no card, runs ``image`` with a trivial command, and ends.

    It is bound to ``node`` directly (``nodeName``), so the kubelet there pulls
    the image; whether the command then succeeds does not matter.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": k8s.namespace,
                     "labels": labels(run_id, PREPULL, name, home=home)},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": node,
            "automountServiceAccountToken": False,
            "activeDeadlineSeconds": int(k8s.prepull_timeout),
            "containers": [{
                "name": "prepull",
                "image": image,
                "imagePullPolicy": "Always" if k8s.pull_policy == "Always" else "IfNotPresent",
                "command": ["true"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
        },
    }
