"""``rngdctl doctor``: is this machine and this cluster ready for the k8s launcher?

Each check says ✓ or ✗ with what it found and, when it fails, the fix. The
checks run in order; a check that needs the API is skipped (✗, "not
checked") when the API does not answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from daemon.home import Config
from daemon.launchers.k8s import cluster as readings
from daemon.launchers.k8s.jobspec import CARD_RESOURCES

#: Where a permission is asked when it is not the Jobs' namespace (True) or the cluster
#: (False): the agents' own namespace, ``[k8s] agent_namespace``.
AGENTS = "agents"

#: (verb, resource, subresource, group, namespaced): what the daemon does. No watch: the
#: daemon reads by list and get each tick.
PERMISSIONS = [
    *[(verb, "jobs", None, "batch", True) for verb in ("create", "get", "list", "delete")],
    *[(verb, "pods", None, "", True) for verb in ("get", "list", "create", "delete")],
    ("get", "pods", "log", "", True),
    ("get", "nodes", None, "", False),
    ("list", "nodes", None, "", False),
    ("list", "pods", None, "", False),  # pods of every namespace on the node: cards in use
    ("list", "configmaps", None, "", AGENTS),  # the node agents' readings
    ("list", "resourceslices", None, "resource.k8s.io", False),  # doctor: cards under DRA
    ("get", "persistentvolumeclaims", None, "", True),  # [k8s] output_volume exists
    # Leader election between replicas (daemon/launchers/k8s/leader.py): create the Lease, and
    # get/update only the one named [k8s] lease_name (RBAC resourceNames).
    *[(verb, "leases", None, "coordination.k8s.io", True) for verb in ("get", "create",
                                                                      "update")],
]

#: Verbs that RBAC grants on one named object: the access review names it.
NAMED = {("leases", "get"), ("leases", "update")}

#: What ``rngdctl agent`` does: write its own ConfigMap (create once, then patch; the
#: agents' admission policy holds it to its node's), list the pods on its node.
AGENT_PERMISSIONS = [
    *[(verb, "configmaps", None, "", AGENTS) for verb in ("create", "patch")],
    ("list", "pods", None, "", False),
]


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def run_checks(config: Config, *, proc: str = "/proc", agent: bool = False) -> list[Check]:
    """Every check, in order; never raises for a cluster problem."""
    from daemon.launchers.k8s.client import K8sClient, K8sError
    from daemon.probes.host_reading import read_host

    k8s = config.k8s
    checks: list[Check] = []
    try:
        client, conn = K8sClient.from_config(k8s)
        client.retries = min(client.retries, 1)
    except K8sError as exc:
        checks.append(Check("kubeconfig", False, str(exc),
                            "set KUBECONFIG, create ~/.kube/config, or pass --context"))
        client = None
    else:
        checks.append(Check("kubeconfig", True, f"{conn.source}, context {conn.context or '-'}, "
                                                f"server {conn.server}"))
    try:
        if client is not None:
            checks += _api_checks(client, config, AGENT_PERMISSIONS if agent else PERMISSIONS,
                                  agent=agent)
    finally:
        if client is not None:
            client.close()

    host = read_host(tuple(config.gates.device_globs), proc=proc)
    checks.append(Check(
        "/proc visible", host.complete,
        "every process is visible (root): device holders are seen" if host.complete
        else host.visibility_note,
        "run the daemon as root with the host's PID namespace (deploy/daemon-on-node.yaml)"))
    k = config.gates.consecutive
    checks.append(Check(
        "race safety", k >= 2, f"gates must pass on {k} tick(s) in a row",
        "set [gates] consecutive = 2 in config.toml (the k8s launcher raises 1 to 2 itself)"))
    return checks


def _api_checks(client, config: Config, permissions, *, agent: bool = False) -> list[Check]:
    from daemon.launchers.k8s.client import K8sError

    k8s = config.k8s
    out: list[Check] = []
    try:
        version = client.version()
    except K8sError as exc:
        fix = "check the server address and your network; `kubectl get --raw /version`"
        return out + [Check("API answers", False, str(exc), fix)]
    out.append(Check("API answers", True, f"Kubernetes {version.get('gitVersion', '?')}"))

    for verb, resource, sub, group, namespaced in permissions:
        what = resource + (f"/{sub}" if sub else "")
        namespace = (k8s.agent_namespace if namespaced == AGENTS
                     else k8s.namespace if namespaced else None)
        where = f"in namespace {namespace}" if namespace else "cluster-wide"
        name = k8s.lease_name if (resource, verb) in NAMED else None
        if name:
            what += f" {name}"
        try:
            allowed, reason = client.access_review(
                verb=verb, resource=resource, group=group, subresource=sub,
                namespace=namespace, name=name)
        except K8sError as exc:
            out.append(Check(f"may {verb} {what}", False, str(exc), "see the API check"))
            continue
        fix = ("kubectl apply -f deploy/agent-daemonset.yaml (Role rngdctl-agent for its "
               "ConfigMap in the agents' namespace, ClusterRole rngdctl-agent for pods)" if agent
               else "kubectl apply -f deploy/rbac.yaml (Role for jobs, pods and the Lease, "
                    "Role rngdctl-agent-readings for the agents' ConfigMaps, ClusterRole for "
                    "nodes, pods and ResourceSlices; a [k8s] lease_name other than "
                    "rngdctl-daemon goes in its resourceNames)")
        out.append(Check(f"may {verb} {what}", allowed,
                         f"{where}" + (f": {reason}" if reason else ""), "" if allowed else fix))
    if agent:
        return out  # the agent reads no node, image or queue

    node_name = k8s.node
    try:
        if not node_name:
            with_cards = [n["metadata"]["name"] for n in client.list_nodes()
                          if (readings.allocatable_cards(n, k8s.card_resource) or 0) > 0]
            if len(with_cards) != 1:
                return out + [Check("node", False, f"[k8s] node is not set; nodes with "
                                    f"{k8s.card_resource or ', '.join(CARD_RESOURCES)}: "
                                    f"{', '.join(with_cards) or 'none'}",
                                    "set [k8s] node = \"NAME\" in config.toml")]
            node_name = with_cards[0]
        node = client.read_node(node_name)
    except K8sError as exc:
        return out + [Check("node", False, str(exc), "see the API and permission checks")]
    if node is None:
        return out + [Check("node", False, f"node {node_name} does not exist",
                            "kubectl get nodes; set [k8s] node in config.toml")]
    cards = readings.allocatable_cards(node, k8s.card_resource)
    resource = readings.card_resource(node, k8s.card_resource)
    out.append(_dra_check(client, node_name))
    out.append(Check("node", bool(cards),
                     f"{node_name}: {cards} allocatable {resource}" if cards
                     else readings.no_cards_message(node, k8s.card_resource),
                     "" if cards else _no_cards_fix(node)))
    listed = readings.image_listed(node, k8s.image)
    out.append(Check("image", listed,
                     f"{k8s.image} is on {node_name}" if listed
                     else f"{k8s.image} is not in {node_name}'s status.images (a capped list)",
                     "" if listed else "the daemon pre-pulls it with a card-less pod; or pull "
                                       "it on the node now"))
    out.append(_output_check(client, k8s))
    return out


def _no_cards_fix(node: dict) -> str:
    if readings.partitions(node):
        return ("set the Furiosa device plugin to whole cards on this node, or [k8s] "
                "card_resource to its partition resource")
    return "install the Furiosa device plugin on the node"


def _dra_check(client, node_name: str) -> Check:
    """Whether Furiosa's DRA driver publishes cards, and on the launch node: rngdctl places
    no DRA claims, and a card DRA gives a pod is one its gate cannot see."""
    from daemon.launchers.k8s.client import K8sError

    driver = readings.DRA_DRIVER
    try:
        slices = client.list_resource_slices(driver)
    except K8sError as exc:
        return Check("DRA", False, str(exc), "see the permission checks")
    if not slices:
        served = "no" if slices is not None else "the API serves no resource.k8s.io/v1, so no"
        return Check("DRA", True, f"{served} {driver} ResourceSlices: the cards are the "
                                  f"device plugin's")
    where = sorted({(s.get("spec") or {}).get("nodeName") or "every node" for s in slices})
    devices = sum(len((s.get("spec") or {}).get("devices") or []) for s in slices)
    here = node_name in where or "every node" in where
    detail = (f"{len(slices)} {driver} ResourceSlice(s), {devices} device(s), on "
              f"{', '.join(where[:4])}{' ...' if len(where) > 4 else ''}: rngdctl places no "
              f"DRA claims (its Jobs ask the device plugin's resource)")
    if here:
        detail += f", and on {node_name} a card DRA allocates is not seen by its gates"
    return Check("DRA", not here, detail,
                 f"run rngdctl's Jobs on nodes the device plugin serves, not {node_name}"
                 if here else "")


def _output_check(client, k8s) -> Check:
    """The claim a run's model and checkpoints go to (issue 26)."""
    from daemon.launchers.k8s.client import K8sError

    fix = ("kubectl apply -f deploy/output-pvc.yaml, then set [k8s] output_volume = "
           "\"rngdctl-output\" in config.toml")
    if not k8s.output_volume:
        return Check("output volume", False, "[k8s] output_volume is not set: a run on "
                     "Kubernetes keeps no model and no checkpoint, and cannot resume", fix)
    try:
        claim = client.read_pvc(k8s.namespace, k8s.output_volume)
    except K8sError as exc:
        return Check("output volume", False, str(exc), "see the API and permission checks")
    if claim is None:
        return Check("output volume", False, f"PersistentVolumeClaim {k8s.namespace}/"
                     f"{k8s.output_volume} does not exist", fix)
    phase = (claim.get("status") or {}).get("phase") or "phase unknown"
    size = ((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
    return Check("output volume", phase in ("Bound", "Pending"),
                 f"{k8s.namespace}/{k8s.output_volume}: {phase}"
                 + (f", {size}" if size else "") + f", mounted at {k8s.output_path} in each "
                 f"Job; a run's model goes to {k8s.output_path}/runs/<id>/model",
                 "" if phase in ("Bound", "Pending") else "kubectl describe pvc "
                 f"{k8s.output_volume} -n {k8s.namespace}")
