"""Shapes: a training config as the step-time model sees it, and the trainer's placement."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.errors import BadInput, ModelFitError
from trainer.placement import blocks, placement_problem

__all__ = ["Shape", "blocks", "check_placement"]  # blocks: the trainer's, for the model


def _extra(step: dict) -> dict:
    """The step's extra keys: the store's ``extra`` column, or top-level keys of raw JSON."""
    extra = step.get("extra")
    return extra if isinstance(extra, dict) else step


def check_placement(layers: int, cards: int, resident_per_card: int) -> None:
    """Refuse a placement the trainer cannot make (BadInput, by trainer/placement.py)."""
    problem = placement_problem(layers, cards, resident_per_card)
    if problem:
        raise BadInput(problem)


@dataclass(frozen=True)
class Shape:
    """A training config as the step-time model sees it; one that cannot exist is BadInput."""

    layers: int
    cards: int = 1
    resident_per_card: int = 0
    accum: int = 1
    seq_len: int = 64
    micro_batch: int = 1

    def __post_init__(self):
        if self.layers < 1 or self.cards < 1 or self.accum < 1 or self.seq_len < 1 \
                or self.micro_batch < 1 or self.resident_per_card < 0:
            raise BadInput(f"not a config the model can price: {self.describe()}")
        check_placement(self.layers, self.cards, self.resident_per_card)

    @property
    def resident(self) -> int:
        return self.cards * self.resident_per_card

    @property
    def offloaded(self) -> int:
        return self.layers - self.resident

    @property
    def tokens(self) -> int:
        """Token positions per optimizer step (padding included: the device computes it)."""
        return self.micro_batch * self.seq_len * self.accum

    def describe(self) -> str:
        return (f"{self.cards} card{'s' if self.cards != 1 else ''} x {self.resident_per_card} "
                f"resident of {self.layers} layers, seq {self.seq_len}, accum {self.accum}"
                + (f", micro-batch {self.micro_batch}" if self.micro_batch != 1 else ""))

    @classmethod
    def of_step(cls, step: dict | None) -> Shape:
        """The shape one step record (a pass's newest) declares."""
        if not step:
            raise ModelFitError("cannot fit: the pass has no steps")
        return cls._declared(_extra(step), "resident_per_card", "the step records lack")

    @classmethod
    def of_config(cls, config: dict) -> Shape:
        """The shape a pass's start config declares."""
        return cls._declared(config, "resident_layers", "the pass's config lacks")

    @classmethod
    def _declared(cls, values: dict, resident_key: str, lacks: str) -> Shape:
        """The shape from a step's extra or a start config (resident per card named in each)."""
        missing = [k for k in ("layers", "cards", resident_key, "seq_len", "accum")
                   if not isinstance(values.get(k), int)]
        if missing:
            raise ModelFitError(f"cannot fit: {lacks} {', '.join(missing)}")
        return cls(layers=values["layers"], cards=values["cards"],
                   resident_per_card=values[resident_key], accum=values["accum"],
                   seq_len=values["seq_len"], micro_batch=int(values.get("micro_batch") or 1))
