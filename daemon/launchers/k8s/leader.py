"""Leader election between daemon replicas: one Lease, one daemon that launches.

Two replicas of the daemon (deploy/daemon-deployment.yaml) compete for the
Lease ``[k8s] lease_name`` (coordination.k8s.io/v1) in rngdctl's namespace,
the way client-go's leaderelection package does it:

- Every write carries the ``resourceVersion`` we last saw: the API server
  refuses a stale one with 409, so two replicas can never both believe they
  wrote the last renewal.
- A replica that does not hold the Lease takes it only when the holder is
  empty (released), or when the record it observed (holder, renewTime,
  resourceVersion) has stayed the same for the Lease's ``leaseDurationSeconds``
  by ITS OWN monotonic clock. Two hosts' clocks are never compared.
- The holder counts itself leader while its last successful write is younger
  than ``renew_deadline`` (< lease duration) by its own clock, so a leader
  that stalls stops acting before the other replica can take over.
- One write per tick while leading: ``fence()`` right before a launch (a
  leader that lost the Lease mid-tick gets 409 there and launches nothing),
  else ``renew()`` at the tick's end.
- The Lease carries its home's id (``app.kubernetes.io/instance``): a Lease
  of another home's (two homes in one namespace, one ``[k8s] lease_name``) is
  never taken, expired or not; the replica stays a standby saying so.

Every method answers with a bool and keeps the reason in ``note``; an API
failure never raises out of here (the client has its own timeouts).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import math
import os
import time

from daemon.launchers.k8s import jobspec
from daemon.launchers.k8s.client import K8sClient, K8sConflict, K8sError, K8sRejected
from daemon.scheduling import replicas

log = logging.getLogger("rngdctl.leader")

API_VERSION = "coordination.k8s.io/v1"


def identity() -> str:
    """This replica's holder identity: its pod's name (the hostname in a pod) and pid."""
    return f"{replicas.here()}/{os.getpid()}"


def micro_time(t: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One replica's view of the Lease. ``clock`` is monotonic; ``wall`` stamps the record."""

    def __init__(self, client: K8sClient, *, namespace: str, name: str, identity: str,
                 home: str, lease_duration: float = 15.0, renew_deadline: float = 10.0,
                 clock=time.monotonic, wall=time.time):
        if not 0 < renew_deadline < lease_duration:
            raise ValueError(f"renew_deadline ({renew_deadline}) must be above 0 and below "
                             f"lease_duration ({lease_duration})")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.home = home  # Store.home_id: the Lease's instance label
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.clock = clock
        self.wall = wall
        self.holder: str | None = None  # who holds the Lease, as last seen
        self.note = ""  # why we are not (or no longer) the leader
        self._lease: dict | None = None  # the Lease as last read or written
        self._observed: tuple | None = None  # (holder, renewTime, resourceVersion)
        self._observed_at: float | None = None  # our clock when that record first showed
        self._written_at: float | None = None  # our clock when our last good write was sent
        self._wrote_this_tick = False

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    @property
    def leading(self) -> bool:
        """Our last successful write is younger than the renew deadline (no API call)."""
        return self._written_at is not None \
            and self.clock() - self._written_at < self.renew_deadline

    # === the three calls of a tick ===========================================

    def lead(self) -> bool:
        """At a tick's start: are we the leader? Takes the Lease when free or expired.

        While we lead (by our own clock) this makes no call: the tick's one write
        is its fence or its renewal.
        """
        self._wrote_this_tick = False
        if self.leading:
            return True
        return self._try()

    def fence(self) -> bool:
        """Right before an act only the leader may do: one guarded write, True if it held."""
        if self._lease is None or self._written_at is None:
            self.note = f"not the holder of the {self.where}"
            return False
        return self._write(acquire=False)

    def renew(self) -> bool:
        """At a tick's end: renew unless this tick already wrote (acquired or fenced)."""
        if self._wrote_this_tick or self._written_at is None:
            return self._written_at is not None
        if self._write(acquire=False):
            return True
        return self.leading  # a failed renewal: still leader until the renew deadline

    def release(self) -> None:
        """On a clean stop: hand the Lease back (empty holder), so the standby takes it now."""
        if self._written_at is None or self._lease is None:
            return
        body = copy.deepcopy(self._lease)
        body["spec"] = {**(body.get("spec") or {}), "holderIdentity": "",
                        "leaseDurationSeconds": 1, "renewTime": micro_time(self.wall())}
        try:
            self.client.replace_lease(self.namespace, self.name, body)
        except K8sError as exc:  # the standby then waits for the Lease to expire
            log.warning("releasing the %s failed: %s", self.where, exc)
        self._written_at = None
        self.holder = None

    # === reading and writing the Lease =======================================

    def _try(self) -> bool:
        try:
            lease = self.client.read_lease(self.namespace, self.name)
        except K8sError as exc:
            return self._lost(f"cannot read the {self.where}: {exc}")
        if lease is None:
            return self._create()
        if jobspec.another_homes(lease, self.home):
            other = lease["metadata"]["labels"][jobspec.INSTANCE_LABEL]
            return self._lost(f"the {self.where} is another rngdctl home's ({other}; this "
                              f"home is {self.home}): set [k8s] lease_name to one of its own")
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity \
                and self.clock() - self._observed_at < duration:
            return self._lost(f"{holder} holds the {self.where}")
        return self._write(acquire=holder != self.identity)

    def _create(self) -> bool:
        now = micro_time(self.wall())
        body = {"apiVersion": API_VERSION, "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": jobspec.selector(self.home)},
                "spec": {"holderIdentity": self.identity,
                         "leaseDurationSeconds": math.ceil(self.lease_duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        sent = self.clock()
        try:
            written = self.client.create_lease(self.namespace, body)
        except K8sConflict:
            return self._lost(f"another replica created the {self.where} first")
        except K8sError as exc:
            return self._lost(f"cannot create the {self.where}: {exc}")
        self._took(written, sent)
        return True

    def _write(self, *, acquire: bool) -> bool:
        """PUT our renewal (or takeover) guarded by the resourceVersion we last saw."""
        body = copy.deepcopy(self._lease)
        # A Lease made before homes had an id becomes this home's with its first write.
        body.setdefault("metadata", {}).setdefault("labels", {}).update(
            jobspec.selector(self.home))
        spec = dict(body.get("spec") or {})
        now = micro_time(self.wall())
        if acquire:
            spec["acquireTime"] = now
            if spec.get("holderIdentity"):
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(holderIdentity=self.identity, renewTime=now,
                    leaseDurationSeconds=math.ceil(self.lease_duration))
        body["spec"] = spec
        sent = self.clock()
        try:
            written = self.client.replace_lease(self.namespace, self.name, body)
        except K8sConflict:
            self._lease = None  # read it again before anything else
            return self._lost(f"another replica wrote the {self.where} first (409)")
        except K8sRejected as exc:  # 404: deleted under us; 403: no right to it
            self._lease = None
            return self._lost(f"cannot write the {self.where}: {exc}")
        except K8sError as exc:
            self.note = f"cannot write the {self.where}: {exc}"
            log.warning("%s", self.note)
            return False
        self._took(written, sent)
        return True

    def _took(self, written: dict, sent: float) -> None:
        # Our lease runs from when the write was SENT: the server stored it later,
        # so the other replica cannot see it expire before we do.
        self._observe(written, at=sent)
        self._written_at = sent
        self._wrote_this_tick = True
        self.note = ""

    def _observe(self, lease: dict, at: float | None = None) -> None:
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  (lease.get("metadata") or {}).get("resourceVersion"))
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock() if at is None else at
        self._lease = lease
        self.holder = spec.get("holderIdentity") or None

    def _lost(self, why: str) -> bool:
        self._written_at = None
        self.note = why
        return False
