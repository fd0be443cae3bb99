"""Whether a placement fits: card and host memory by the trainer's own accounting.

The bytes per parameter are trainer/footprint.py's (shared with the trainer, which refuses
by them at its start); this module prices a ``Shape`` by them and words the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.stepmodel.shape import Shape
from trainer import footprint
from trainer.footprint import (
    HOST_BYTES,
    HOST_PLAYS_CARD,
    OFFLOADED_BYTES,
    RESIDENT_BYTES,
    host_plays_cards,
)

__all__ = ["CARD_GB", "HOST_BYTES", "HOST_PLAYS_CARD", "OFFLOADED_BYTES", "RESIDENT_BYTES",
           "MemoryCheck", "card_bytes", "card_gb_for", "host_bytes", "host_memory_check",
           "host_plays_cards", "memory_check"]

#: Card memory in GB by backend kind, where the kind fixes it (RNGD: 48 GB HBM3).
CARD_GB = {"furiosa": 48.0}


@dataclass(frozen=True)
class MemoryCheck:
    fits: bool
    need_gb: list  # per card: parameters, gradients and optimizer state
    card_gb: float | None
    message: str


def card_bytes(target: Shape, params_per_layer: int, edge: int = 0,
               tied_head: bool = False) -> list[int]:
    """Bytes of weights, gradients and optimizer state on each card (activations not counted)."""
    return footprint.card_bytes(target.layers, target.cards, target.resident_per_card,
                                params_per_layer, edge, tied_head)


def _gb(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def memory_check(target: Shape, *, params_per_layer: int | None, card_gb: float | None,
                 edge: int = 0, tied_head: bool = False) -> MemoryCheck:
    """Whether C x R resident layers fit in each card's memory by the trainer's accounting."""
    if not params_per_layer:
        return MemoryCheck(True, [], card_gb,
                           "memory not checked: the baseline does not say its parameters per layer")
    need = [b / 1e9 for b in card_bytes(target, params_per_layer, edge, tied_head)]
    worst = max(range(len(need)), key=lambda c: need[c])
    if card_gb is None:
        return MemoryCheck(True, need, None, f"needs {_gb(need[worst])} GB on card {worst} "
                           "(weights, gradients, AdamW state); no card memory limit known")
    if need[worst] > card_gb:
        return MemoryCheck(False, need, card_gb, (
            f"{target.cards} x {target.resident_per_card} resident layers would not fit: card "
            f"{worst} needs {_gb(need[worst])} GB for weights, gradients and AdamW state "
            f"({RESIDENT_BYTES} B per resident and {OFFLOADED_BYTES} B per offloaded parameter, "
            f"{params_per_layer:,} per layer), more than its {card_gb:g} GB"))
    return MemoryCheck(True, need, card_gb, f"fits: card {worst} needs {_gb(need[worst])} GB "
                       f"of {card_gb:g} GB before activations")


def host_bytes(target: Shape, params_per_layer: int, *, edge: int = 0, tied_head: bool = False,
               host_plays_card: bool = False) -> int:
    """Bytes of host memory the placement needs: offloaded layers' masters, gradients, moments,
    and the cards' own where the host plays them (cpu backends); activations are not counted."""
    return footprint.host_bytes(target.layers, target.cards, target.resident_per_card,
                                params_per_layer, edge=edge, tied_head=tied_head,
                                host_plays_card=host_plays_card)


def host_memory_check(target: Shape, *, params_per_layer: int | None, host_gb: float | None,
                      edge: int = 0, tied_head: bool = False,
                      host_plays_card: bool = False) -> MemoryCheck:
    """Whether the host holds what the placement puts there, by the trainer's accounting."""
    if not params_per_layer:
        return MemoryCheck(True, [], host_gb, "host memory not checked: the baseline does not "
                           "say its parameters per layer")
    need = host_bytes(target, params_per_layer, edge=edge, tied_head=tied_head,
                      host_plays_card=host_plays_card) / 1e9
    what = "offloaded layers" + (" and the cards it plays" if host_plays_card else "")
    fits = host_gb is None or need <= host_gb
    message = (f"host needs {_gb(need)} GB for the {what}; no host limit known" if host_gb is None
               else f"fits: host needs {_gb(need)} GB of {host_gb:g} GB for the {what}" if fits
               else f"host would need {_gb(need)} GB for the {what}, more than its {host_gb:g} GB")
    return MemoryCheck(fits, [need], host_gb, message)


def card_gb_for(backend: str | None) -> float | None:
    """The card memory the backend fixes (None: no fixed limit, e.g. cpu)."""
    first = str(backend or "cpu").split(",")[0].strip()
    return CARD_GB.get(first.split(":")[0])
