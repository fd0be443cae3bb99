"""Automatic retry: the one place that says which failures are transient, and what to do.

A launcher that sees a run fail asks ``decide`` with the failure's class and its
evidence; the answer is a requeue (with a ``retry`` event, stored by the
scheduler) or the failure itself, with why it was not retried. The rule, as
docs/design.md ("Automatic retry") gives it:

- ``image_pull``: the kubelet could not pull the image, and the image was pulled
  before (it is in the node's status.images, a pod of ours ran it, or our pre-pull
  pod got it), so the name is right and the registry lets us in: a registry or
  network hiccup, which a pull after it got past before. Never for
  ``InvalidImageName``, nor for an image nothing ever pulled (a typo, a missing
  tag, no access: the next pull fails the same way). A pre-pull that ran out of
  time (no answer either way) is retried.
- ``card_race``: the node refused the pod at admission for want of a resource
  (``OutOf<resource>``): someone took the cards between our gate check and the
  kubelet's admission.
- ``foreign_holder``: a process that is not ours held the cards when the run
  started (k8s: a device holder outside our pod before the first step; local:
  the trainer's backend found its card held).
- ``eviction``: the pod was put out (node pressure, preemption), only while
  ``[k8s] requeue_on_eviction`` is on.
- ``preempted``: a SIGTERM that was not rngdctl's (a shutdown, a drain the
  pod did not show) stopped the trainer after a whole step and a checkpoint
  (its ``end`` record says ``preempted``): the next try goes on from there.

Anything else (an exit code, OOM, a deadline, a config error) is never retried.
Every class counts against one cap, ``max_attempts`` tries of the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IMAGE_PULL, CARD_RACE, FOREIGN_HOLDER, EVICTION, PREEMPTED = (
    "image_pull", "card_race", "foreign_holder", "eviction", "preempted")
CLASSES = (IMAGE_PULL, CARD_RACE, FOREIGN_HOLDER, EVICTION, PREEMPTED)
#: The event each retry is stored as (docs/design.md, "Notifications": event kinds).
KIND = "retry"

#: Kubelet reasons that say the image name itself is wrong: no retry, pulled before or not.
NEVER_PULLABLE = ("InvalidImageName", "ErrImageNeverPull")
#: The words trainer/backends/kinds.py uses when a card is held by another process at start.
_HELD = re.compile(r"\bcard \d+ is held by pid \d+|\bevery RNGD card is held\b")


def max_attempts(config) -> int:
    """Tries of a run, the first included: ``[k8s] max_attempts`` where set, else ``[daemon]``."""
    k8s = getattr(getattr(config, "k8s", None), "max_attempts", None)
    return int(k8s if k8s is not None else config.daemon.max_attempts)


#: How a verdict came about: retried; a transient class out of tries; a failure of a
#: class that the evidence says would repeat; no class at all.
RETRY, EXHAUSTED, PERMANENT, NONE = "retry", "exhausted", "permanent", "none"


@dataclass(frozen=True)
class Verdict:
    """What ``decide`` answers: retry or not, and the words for the event and the reason."""

    how: str  # RETRY, EXHAUSTED, PERMANENT or NONE
    cls: str | None
    tries: int
    max_attempts: int
    why: str  # why it is (not) retried, one line

    @property
    def retry(self) -> bool:
        return self.how == RETRY

    def event(self, reason: str | None) -> dict:
        """The ``retry`` event (message and data) of a retried failure, as Outcome.retry."""
        first = (reason or "").splitlines()[0] if reason else ""
        return {"message": f"{self.cls}: try {self.tries + 1} of {self.max_attempts} next "
                           f"({self.why})" + (f"; after: {first}" if first else ""),
                "data": {"class": self.cls, "attempt": self.tries + 1,
                         "max_attempts": self.max_attempts, "reason": first}}

    def failed_reason(self, reason: str) -> str:
        """A failure's reason, saying why it was not retried when the class would have been."""
        return f"{reason} (not retried: {self.why})" if self.how == PERMANENT else reason


def decide(cls: str | None, *, tries: int, limit: int, transient: bool = True,
           evidence: str = "") -> Verdict:
    """Retry a failure of class ``cls`` after ``tries`` tries of at most ``limit``?

    ``transient`` False (the evidence says the failure would repeat) or no class:
    never. ``evidence`` is the one line saying why the class applies.
    """
    if cls is None:
        return Verdict(NONE, None, tries, limit, "not a failure rngdctl retries")
    if not transient:
        return Verdict(PERMANENT, cls, tries, limit, evidence or f"this {cls} is not transient")
    if tries >= limit:
        return Verdict(EXHAUSTED, cls, tries, limit, f"{tries} of {limit} tries used")
    return Verdict(RETRY, cls, tries, limit, evidence or cls.replace("_", " "))


# === the evidence of each class ==============================================


def image_pull_transient(store, image: str, kubelet_reason: str | None, *,
                         listed: bool = False, default_image: str | None = None
                         ) -> tuple[bool, str]:
    """Is a failed pull of ``image`` worth another pull? (transient, the evidence in words)."""
    if kubelet_reason in NEVER_PULLABLE:
        return False, f"{kubelet_reason}: the image name itself is refused"
    if listed:
        return True, f"{image} is in the node's status.images: it was pulled there before"
    when = store.image_pulled_before(image, default_image=default_image)
    if when is not None:
        return True, f"{image} was pulled by rngdctl before"
    return False, (f"{image} was never pulled by rngdctl: a wrong name or tag, or no access, "
                   "fails the same way again; fix it and `rngdctl restart` the run")


def card_held(error: str | None) -> bool:
    """Did the trainer stop because another process held its card at start (local launcher)?"""
    return bool(error and _HELD.search(error))
