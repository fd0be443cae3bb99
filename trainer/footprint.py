"""What a placement holds in memory: bytes per parameter on a card and on the host.

The one owner of these figures. The step model's memory checks (daemon/stepmodel/memory.py)
price a config by them; ``submit`` (daemon/run/) and the trainer's start (trainer/train.py)
refuse by them, in one line, a model the host cannot hold, before anything is allocated.
Activations are not counted. Torch-free (a shared module: the daemon imports it).
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.placement import blocks

#: Bytes per parameter on a card, by the trainer's placement (trainer/engine/layer_engine.py):
#: a resident layer keeps its fp32 master, gradient and AdamW's two moments on
#: the card; an offloaded layer keeps an fp32 compute copy and its gradient;
#: embedding, norm and head are resident on their cards.
RESIDENT_BYTES = 16
OFFLOADED_BYTES = 8
#: Bytes per offloaded parameter in host memory (trainer/engine/layer_engine.py): its fp32
#: master, gradient and AdamW's two moments.
HOST_BYTES = 16
#: Backend kinds whose "cards" are the host itself: their card bytes are host bytes too.
HOST_PLAYS_CARD = ("cpu", "cpu-compiled", "cpu-perturbed")


def edge_params(vocab: int, hidden: int, tied: bool) -> int:
    """Parameters always on the cards: the embedding, the final norm and (untied) the head."""
    return vocab * hidden * (1 if tied else 2) + hidden


def card_bytes(layers: int, cards: int, resident_per_card: int, params_per_layer: int,
               edge: int = 0, tied_head: bool = False) -> list[int]:
    """Bytes of weights, gradients and optimizer state on each card (activations not counted)."""
    out = []
    for block in blocks(layers, cards):
        r = min(resident_per_card, block)
        out.append(params_per_layer * (RESIDENT_BYTES * r + OFFLOADED_BYTES * (block - r)))
    if edge:
        # The embedding on the first card; norm and head on the last (the first when tied).
        if tied_head or cards == 1:
            out[0] += RESIDENT_BYTES * edge
        else:
            out[0] += RESIDENT_BYTES * (edge // 2)
            out[-1] += RESIDENT_BYTES * (edge - edge // 2)
    return out


def host_bytes(layers: int, cards: int, resident_per_card: int, params_per_layer: int, *,
               edge: int = 0, tied_head: bool = False, host_plays_card: bool = False) -> int:
    """Bytes of host memory the placement needs: offloaded layers' masters, gradients, moments,
    and the cards' own where the host plays them (cpu backends); activations are not counted."""
    offloaded = layers - cards * resident_per_card
    need = HOST_BYTES * params_per_layer * offloaded
    if host_plays_card:
        need += sum(card_bytes(layers, cards, resident_per_card, params_per_layer, edge,
                               tied_head))
    return need


def host_plays_cards(backend: str | None) -> bool:
    """Whether every card of a ``--backend`` list is the host itself (``HOST_PLAYS_CARD``);
    False where the backend is not known."""
    if not isinstance(backend, str) or not backend.strip():
        return False
    return all(b.split(":")[0].strip() in HOST_PLAYS_CARD for b in backend.split(","))


# === a run on this host ======================================================


def run_host_bytes(arch, *, cards: int, resident_per_card: int, backend: str,
                   baseline: bool, interleave: int) -> int:
    """Host bytes a run's passes hold at once (``arch``: a trainer.modelconfig.Architecture).

    The main pass's placement; with ``baseline`` its all-offload pass too, held beside the
    main pass when the two interleave, else one after the other (the larger counts).
    """
    def need(resident: int) -> int:
        return host_bytes(arch.layers, cards, resident, arch.params_per_layer,
                          edge=edge_params(arch.vocab, arch.hidden, arch.tied),
                          tied_head=arch.tied, host_plays_card=host_plays_cards(backend))

    main = need(resident_per_card)
    if not baseline:
        return main
    return main + need(0) if interleave else max(main, need(0))


def host_memory_bytes() -> int | None:
    """The memory this process may use: the host's, or less where its cgroup limits it
    (a Kubernetes pod, a systemd slice). None when neither can be read."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        total = None
    limit = _cgroup_limit()
    if total is None or (limit is not None and limit < total):
        return limit
    return total


def _cgroup_limit(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The lowest cgroup v2 ``memory.max`` from this process's cgroup up; None: unlimited."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            line = next((x for x in f.read(65536).splitlines() if x.startswith("0::")), None)
    except OSError:
        return None
    if line is None:
        return None
    lowest = None
    folder = root / line[3:].strip().lstrip("/")
    while True:
        try:
            text = (folder / "memory.max").read_text(encoding="utf-8")[:64].strip()
            value = None if text == "max" else int(text)
        except (OSError, ValueError):
            value = None
        if value is not None and (lowest is None or value < lowest):
            lowest = value
        if folder == root or root not in folder.parents:
            return lowest
        folder = folder.parent


def too_large(need: int, have: int, what: str, where: str = "this host") -> str | None:
    """The one line that refuses a run needing ``need`` bytes of host memory where ``have``
    are, or None when it fits."""
    if need <= have:
        return None
    return (f"{what} needs {need / 1e9:,.1f} GB of host memory for its weights, gradients and "
            f"AdamW state (the step model's figures; activations not counted), more than the "
            f"{have / 1e9:,.1f} GB {where} has")
