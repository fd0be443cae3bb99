"""Which config to ask for: every (cards, resident) config the node allows, priced.

``rngdctl plan`` and ``rngdctl submit --cards best`` call ``make_plan``. Every
number comes from ``daemon.stepmodel`` (``model_config``: prediction, card
memory check, host memory check); this module only enumerates the configs,
reads what the node allows and picks the fastest one that fits now.

What "the node allows" means (docs/design.md "## Plan"):

- k8s launcher: the node's allocatable ``furiosa.ai/rngd`` cards; free now is
  the ``cards_free`` gate's reading (allocatable minus every pod's requests).
- local launcher, furiosa backend: the RNGD cards this host exposes (the
  distinct ``npuN`` of ``/dev/rngd/npuN*``, or ``/dev/rngdN``); free now are
  those no process holds a device file of.
- local launcher, any other backend (cpu, cuda): the trainer's cards are
  played by one host device, so the node allows every split the trainer
  accepts (up to one card per layer), all free.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from daemon import stepmodel
from daemon.errors import BadInput, ModelFitError

_CARD = re.compile(r"(?:npu|rngd)(\d+)")


# === What the node allows ====================================================


@dataclass(frozen=True)
class Capacity:
    """Cards the node allows and has free now, the host's memory, and how they were read."""

    cards: int | None  # None: as many as the model has layers (the host plays the cards)
    free: int | None  # None: all of them
    host_gb: float | None  # None: unknown, the host check reports the need only
    rule: str

    def allowed(self, layers: int) -> int:
        return layers if self.cards is None else min(self.cards, layers)

    def free_of(self, layers: int) -> int:
        return self.allowed(layers) if self.free is None else min(self.free, layers)


def card_of(path: str) -> int | None:
    """The card index a device file belongs to: /dev/rngd/npu1pe0-3 -> 1, /dev/rngd2 -> 2."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    m = _CARD.match(name)
    return int(m[1]) if m else None


def local_capacity(host, *, backend: str, host_gb: float | None) -> Capacity:
    """What the local launcher's host allows, from a ``host_reading.HostReading``."""
    kind = str(backend or "cpu").split(",")[0].split(":")[0].strip()
    if kind != "furiosa":
        return Capacity(None, None, host_gb,
                        f"local launcher, {kind} backend: the host plays every card, so any "
                        "split the trainer accepts (up to one card per layer), all free")
    cards = {c for c in (card_of(p) for p in host.devices) if c is not None}
    held = {c for h in host.holders for c in (card_of(f) for f in h.files) if c is not None}
    free = cards - held
    return Capacity(len(cards), len(free), host_gb,
                    f"local launcher, furiosa backend: {len(cards)} RNGD cards in /dev/rngd, "
                    f"{len(free)} with no process holding them"
                    + (f" (held: {', '.join(f'npu{c}' for c in sorted(held & cards))})"
                       if held & cards else ""))


def k8s_capacity(launcher, *, host_gb: float | None) -> Capacity:
    """What the k8s launcher's node allows: allocatable cards, and the cards_free gate's reading.

    ``launcher`` is a ``K8sLauncher``; 3 API calls (the node twice, its pods).
    """
    from daemon.launchers.k8s import cluster

    reading = launcher.cluster_reading({"id": None, "config": {"cards": 1}})
    node = launcher.client.read_node(launcher.node())
    total = (cluster.allocatable_cards(node, launcher.k8s.card_resource) if node else None) or 0
    return Capacity(total, min(reading.cards_free or 0, total), host_gb,
                    f"k8s launcher: {reading.cards_detail}")


def memory_quantity_gb(value) -> float | None:
    """A Kubernetes memory quantity ("64Gi", "500M", 2e9) in GB; None when unset or unreadable."""
    if value is None:
        return None
    text = str(value).strip()
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "K": 1e3,
             "M": 1e6, "G": 1e9, "T": 1e12}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    else:
        scale = 1
    try:
        return float(text) * scale / 1e9
    except ValueError:
        return None


def host_memory_gb() -> float | None:
    """The host's physical memory (the whole of it: a plan is for when the run starts)."""
    try:
        import psutil

        return psutil.virtual_memory().total / 1e9
    except (ImportError, OSError):
        return None


# === The plan ================================================================


@dataclass(frozen=True)
class Row:
    cards: int
    resident: int  # per card
    step_s: float
    tokens_per_s: float
    total_s: float  # for the plan's steps
    card_fits: bool
    card_gb: float | None  # the most any one card needs
    card_message: str
    host_fits: bool
    host_gb: float | None
    host_message: str
    free_now: bool  # the cards it asks for are free now
    estimated_terms: tuple

    @property
    def fits(self) -> bool:
        return self.card_fits and self.host_fits

    def as_dict(self) -> dict:
        return {**asdict(self), "estimated_terms": list(self.estimated_terms),
                "fits": self.fits}


@dataclass(frozen=True)
class Priced:
    """The shape every row of a plan is priced at, beside its baseline's: when their tokens a
    step differ, every figure is an extrapolation (the model scales the device compute
    linearly in tokens; attention's quadratic part and fixed costs do not scale so)."""

    seq_len: int
    accum: int
    micro_batch: int
    baseline_seq_len: int
    baseline_accum: int
    baseline_micro_batch: int

    @classmethod
    def of(cls, target, baseline) -> Priced:
        """From two ``stepmodel.Shape``s: the asked one and the baseline's."""
        return cls(target.seq_len, target.accum, target.micro_batch, baseline.seq_len,
                   baseline.accum, baseline.micro_batch)

    @property
    def tokens(self) -> int:
        return self.seq_len * self.accum * self.micro_batch

    @property
    def baseline_tokens(self) -> int:
        return self.baseline_seq_len * self.baseline_accum * self.baseline_micro_batch

    @property
    def extrapolation(self) -> float | None:
        """The asked tokens a step over the baseline's; None when they are the same."""
        return None if self.tokens == self.baseline_tokens else self.tokens / self.baseline_tokens

    def words(self) -> str:
        """"priced at seq 512, accum 4 (2,048 tokens a step): extrapolated 16x from ..."."""
        text = (f"priced at seq {self.seq_len}, accum {self.accum}"
                + (f", micro-batch {self.micro_batch}" if self.micro_batch != 1 else "")
                + f" ({self.tokens:,} tokens a step")
        ratio = self.extrapolation
        if ratio is None:
            return text + ", as the baseline ran: not extrapolated in tokens)"
        return (text + f"): extrapolated {ratio:.3g}x from the baseline's "
                f"{self.baseline_tokens:,} tokens a step (seq {self.baseline_seq_len}, accum "
                f"{self.baseline_accum}), as if step time grew linearly with tokens")

    def as_dict(self) -> dict:
        return {**asdict(self), "tokens": self.tokens, "baseline_tokens": self.baseline_tokens,
                "extrapolation": self.extrapolation}


@dataclass(frozen=True)
class Plan:
    baseline_run: int
    baseline_pass: str
    baseline: str  # the baseline's shape, described
    baseline_step_s: float
    model: str
    steps: int
    capacity: Capacity
    rows: tuple
    best: Row | None
    why: str  # why ``best`` (or why none)
    priced: Priced  # the seq-len and accum every row is priced at, and the baseline's

    def as_dict(self) -> dict:
        return {"baseline_run": self.baseline_run, "baseline_pass": self.baseline_pass,
                "baseline": self.baseline, "baseline_step_s": self.baseline_step_s,
                "model": self.model, "steps": self.steps, "capacity": asdict(self.capacity),
                "priced": self.priced.as_dict(),
                "rows": [r.as_dict() for r in self.rows],
                "best": ({"cards": self.best.cards, "resident": self.best.resident}
                         if self.best else None),
                "why": self.why}


def _row(answer, steps: int, free: int) -> Row:
    p, card, host = answer.prediction, answer.memory, answer.host_memory
    return Row(
        cards=p.target.cards, resident=p.target.resident_per_card, step_s=p.step_s,
        tokens_per_s=p.tokens_per_s, total_s=p.step_s * steps,
        card_fits=card.fits, card_gb=max(card.need_gb) if card.need_gb else None,
        card_message=card.message, host_fits=host.fits,
        host_gb=host.need_gb[0] if host.need_gb else None, host_message=host.message,
        free_now=p.target.cards <= free, estimated_terms=tuple(p.estimated_terms))


def _best(rows: list[Row], free: int) -> tuple[Row | None, str]:
    ok = [r for r in rows if r.fits and r.free_now]
    if ok:
        # Fastest; on a tie the config that asks for less.
        best = min(ok, key=lambda r: (r.step_s, r.cards, r.resident))
        return best, (f"the fastest config that fits and needs no more than the {free} "
                      f"card{'s' if free != 1 else ''} free now")
    if not free:
        return None, "no card is free now"
    if not any(r.fits for r in rows):
        return None, "no config fits in card and host memory"
    return None, f"no config that fits needs {free} card{'s' if free != 1 else ''} or fewer"


def make_plan(store, baseline_run: int, capacity: Capacity, *, steps: int,
              seq_len: int | None = None, accum: int | None = None,
              card_gb: float | None = None) -> Plan:
    """Every (cards, resident per card) config the node allows, priced by the step model at
    ``seq_len`` and ``accum`` (None: the baseline's; ``rngdctl plan`` and ``submit --cards
    best`` give submit's, so the two price the config a submit runs)."""
    base = stepmodel.baseline_of(store, baseline_run)
    if base is None:
        raise ModelFitError(f"cannot fit: run {baseline_run} has no all-offload pass "
                            "(submit it with --baseline, or with --resident 0)")
    if steps < 1:
        raise BadInput(f"--steps must be >= 1, got {steps}")

    def price(cards: int, resident: int):
        return stepmodel.model_config(store, baseline_run, cards=cards, resident=resident,
                                      seq_len=seq_len, accum=accum, card_gb=card_gb,
                                      host_gb=capacity.host_gb, check_host=True)

    first = price(1, 0)  # fits the terms; its baseline shape gives the layer count
    terms = first.prediction.terms
    layers = terms.baseline.layers
    free = capacity.free_of(layers)
    rows = []
    for cards in range(1, capacity.allowed(layers) + 1):
        for resident in range(min(stepmodel.blocks(layers, cards)) + 1):
            answer = first if (cards, resident) == (1, 0) else price(cards, resident)
            rows.append(_row(answer, steps, free))
    best, why = _best(rows, free) if rows else (None, f"the node allows no card: {capacity.rule}")
    return Plan(baseline_run=base.run_id, baseline_pass=base.label,
                baseline=terms.baseline.describe(), baseline_step_s=terms.baseline_median_s,
                model=str(store.run(baseline_run)["config"].get("model")), steps=steps,
                capacity=capacity, rows=tuple(rows), best=best, why=why,
                priced=Priced.of(first.prediction.target, terms.baseline))
