"""Where each layer lives: which card, resident on it or offloaded to the host.

The backend list names the cards in layer order. Layers 0..L-1 are cut into
contiguous blocks, one per card, as even as possible (the first cards take
the extra layer when L does not divide). On every card the first R layers of
its block are *resident*: their fp32 master weights, gradients and AdamW state
live on the card and the card updates them. The other layers of the block are
*offloaded*: their fp32 masters and AdamW state live in host memory; the card
holds only their compute weights and gradients.

The embedding lives on the first card; the final norm and the head on the last
card (on the first card when the head is tied to the embedding, so the one
shared weight has one master). They are always resident: they are used by
every micro-batch and updated by the card's optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.errors import UsageError


@dataclass(frozen=True)
class Placement:
    layers: int
    cards: int
    resident_per_card: int
    card_of_layer: tuple[int, ...]
    resident: tuple[bool, ...]
    head_card: int

    @classmethod
    def plan(cls, layers: int, cards: int, resident_per_card: int, tied: bool) -> Placement:
        if resident_per_card < 0:
            raise UsageError("--resident-layers must be 0 or more")
        problem = placement_problem(layers, cards, resident_per_card)
        if problem:
            raise UsageError(problem)
        card_of, resident = [], []
        for c in range(cards):
            # Blocks as even as possible, the extra layers on the first cards.
            lo, hi = _block(layers, cards, c)
            for i in range(lo, hi):
                card_of.append(c)
                resident.append(i - lo < resident_per_card)
        return cls(layers, cards, resident_per_card, tuple(card_of), tuple(resident),
                   head_card=0 if tied else cards - 1)

    def block(self, card: int) -> range:
        return range(*_block(self.layers, self.cards, card))

    @property
    def resident_layers(self) -> int:
        return sum(self.resident)

    @property
    def offloaded_layers(self) -> int:
        return self.layers - self.resident_layers

    def describe(self) -> str:
        parts = []
        for c in range(self.cards):
            b = self.block(c)
            r = [i for i in b if self.resident[i]]
            parts.append(f"card {c}: layers {b.start}-{b.stop - 1}, resident {len(r)}")
        return "; ".join(parts)


def blocks(layers: int, cards: int) -> list[int]:
    """Layers per card: contiguous blocks as even as possible, extras on the first cards."""
    base, extra = divmod(layers, cards)
    return [base + (1 if c < extra else 0) for c in range(cards)]


def placement_problem(layers: int, cards: int, resident_per_card: int) -> str | None:
    """Why ``layers`` cannot go on ``cards`` with ``resident_per_card`` resident, or None.

    The one rule (refuse, never clamp) that the trainer, ``submit`` and ``model`` share
    (daemon/stepmodel/shape.py ``check_placement`` raises it as BadInput): every card needs
    a layer, and a card cannot keep more layers resident than its block holds.
    """
    if cards > layers:
        return f"{cards} cards for {layers} layers: every card needs a layer"
    most = min(blocks(layers, cards))
    if resident_per_card > most:
        return (f"{resident_per_card} resident layers per card is more than the {most} "
                f"layers a card holds ({layers} layers on {cards} cards)")
    return None


def _block(layers: int, cards: int, card: int) -> tuple[int, int]:
    base, extra = divmod(layers, cards)
    lo = card * base + min(card, extra)
    return lo, lo + base + (1 if card < extra else 0)
