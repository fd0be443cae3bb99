"""Backends: where a card's layers run. One small interface, three kinds.

``--backend`` is a comma list, one entry per card, in layer order:

- ``cpu``: the host itself plays the card. Uploads and downloads are real
  copies between the host's master buffers and the card's compute buffers.
- ``cuda`` or ``cuda:N``: an NVIDIA GPU.
- ``furiosa:N`` or ``furiosa:auto``: Furiosa RNGD card N (``/dev/rngd/npuN``) through
  furiosa-torch (furiosa_torch.py): its 8 PEs fused into one device, the device type the
  package registers (``furiosa`` or ``rngd``). ``auto`` picks a card no other process holds
  open. The step runs eagerly, op by op (the package's compiled graphs have no autograd),
  from the ops 2026.4 compiles and differentiates (``Backend.card_module`` and
  ``Backend.loss_function``: trainer/backends/furiosa_modules.py).
- ``cpu-compiled``: a CPU card that runs every graph through ``torch.compile`` (the
  ``aot_eager`` backend: forward and backward graphs captured, static shapes, no code
  generation). It exercises ``trainer compile`` and graph reuse across layers on the host.
  It is not a stand-in for an RNGD card: nothing of furiosa-torch runs.
- ``cpu-perturbed``: a CPU card that adds relative noise of 1e-3 to every
  tensor it receives. It exists so that ``trainer check`` can be shown to fail.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch

from trainer.errors import BackendUnavailable, UsageError


@dataclass
class Backend:
    """One card: a torch device plus what the engine needs to know about it."""

    spec: str  # as given on the command line
    device: torch.device
    fused_adamw: bool = True  # torch's fused AdamW kernel runs on this device
    needs_compile: bool = False  # graphs are compiled before they run (furiosa)
    picked: str = ""  # furiosa:auto: which card it picked and why ("picked card 1, as ...")

    @property
    def kind(self) -> str:
        return self.device.type

    def synchronize(self) -> None:
        """Wait until every queued kernel on the card has finished (for honest timings)."""

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device)

    def upload(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy host tensor ``src`` into the card's ``dst``."""
        dst.copy_(src)

    def reset_peak(self) -> None:
        pass

    def peak_gb(self) -> float | None:
        """The card's peak allocated memory since the last reset, where the backend reports it."""
        return None

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, torch.OutOfMemoryError):
            return True
        text = str(exc).lower()
        return isinstance(exc, (RuntimeError, MemoryError)) and (
            "out of memory" in text or "can't allocate memory" in text
            or isinstance(exc, MemoryError)
        )

    def compile(self, fn):
        """The callable the card runs for ``fn`` (compiled where the backend compiles)."""
        return fn

    def card_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """A piece of the model (embedding, decoder layer, norm, head) as this card runs it:
        the module itself, unless the card needs other ops for the same arithmetic."""
        return module

    def loss_function(self, model: torch.nn.Module):
        """The loss as this card computes it: transformers' own, unless its ops differ."""
        return model.loss_function


class CpuBackend(Backend):
    pass


class CompiledCpuBackend(CpuBackend):
    """The host as a card whose graphs are compiled before they run."""

    def compile(self, fn):
        return torch.compile(fn, backend="aot_eager", dynamic=False)


class PerturbedCpuBackend(CpuBackend):
    """A deliberately wrong card for testing ``trainer check``: noisy transfers."""

    RELATIVE_NOISE = 1e-3

    def upload(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(self.perturb(src))

    def perturb(self, t: torch.Tensor) -> torch.Tensor:
        gen = torch.Generator().manual_seed(1234)
        noise = torch.randn(t.shape, generator=gen, dtype=t.dtype)
        return t + noise * (t.abs() + 1e-3) * self.RELATIVE_NOISE


class CudaBackend(Backend):
    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak_gb(self) -> float | None:
        return torch.cuda.max_memory_allocated(self.device) / 1e9


class FuriosaBackend(Backend):
    """A whole RNGD card through furiosa-torch, run eagerly op by op.

    ``needs_compile``: every op compiles on its first call with a new shape (the package caches
    the kernels), which ``trainer compile`` warms. No peak-memory API exists (None).
    """

    def synchronize(self) -> None:
        from trainer.backends import furiosa_torch

        furiosa_torch.synchronize(self.device)

    def card_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """The embedding as ``index_select``, linears as ``mm``, softmax without ``dtype``:
        what 2026.4 compiles and differentiates (trainer/backends/furiosa_modules.py)."""
        from trainer.backends import furiosa_modules

        return furiosa_modules.for_card(module)

    def loss_function(self, model: torch.nn.Module):
        """The causal-LM loss without ``nll_loss``, whose backward 2026.4 cannot compile."""
        from trainer.backends import furiosa_modules

        return furiosa_modules.causal_lm_loss


def rngd_holders(card: int, proc: str | None = None) -> list:
    """Other processes with card ``card``'s device files (``/dev/rngd/npuN...``) open.

    The holder scan (trainer/devices.py, which the daemon reads too) does the reading; the pattern
    ``npu1*`` also matches ``npu10``, hence the exact match on the number here. The proc root
    is ``$RNGDCTL_PROC`` (default /proc): a container that sees the host's processes through
    a mount elsewhere names it, as ``rngdctl agent --proc`` does; the device folder is
    ``$RNGDCTL_RNGD_DEV`` (default /dev/rngd).
    """
    from trainer.backends.furiosa_torch import card_files
    from trainer.devices import device_holders

    proc = proc or os.environ.get("RNGDCTL_PROC") or "/proc"
    prefix = card_files(card)
    exact = re.compile(rf"{re.escape(prefix)}(?!\d)")
    holders, _ = device_holders((f"{prefix}*",), proc)
    return [h for h in holders if h.pid != os.getpid() and any(exact.match(f) for f in h.files)]


def present_rngd_cards(dev: str | None = None) -> list[int]:
    """The cards whose management file (``npuNmgmt``) is in the device folder."""
    from trainer.backends.furiosa_torch import rngd_dev

    try:
        names = os.listdir(dev or rngd_dev())
    except OSError:
        return []
    return sorted({int(m.group(1)) for n in names if (m := re.match(r"npu(\d+)mgmt$", n))})


def _held_by(card: int, holders: list) -> str:
    h = holders[0]
    command = h.cmdline if len(h.cmdline) <= 80 else h.cmdline[:77] + "..."
    return f"card {card} is held by pid {h.pid} ({command})"


def _furiosa(spec: str, which: str, taken: set[int]) -> Backend:
    from trainer.backends import furiosa_torch

    furiosa_torch.load()
    picked = ""
    if which == "auto":
        card, picked = _free_card(spec, taken)
    else:
        card = int(which)
        if holders := rngd_holders(card):
            raise BackendUnavailable(f"backend {spec}: {_held_by(card, holders)}")
    device = furiosa_torch.card_device(card)
    try:
        furiosa_torch.probe(card, device)
    except furiosa_torch.NoCard as exc:
        raise furiosa_torch.NoCard(f"backend {spec}: {picked + ': ' if picked else ''}{exc}",
                                   exc.why) from None
    taken.add(card)
    return FuriosaBackend(spec, device, fused_adamw=False, needs_compile=True, picked=picked)


def _free_card(spec: str, taken: set[int]) -> tuple[int, str]:
    """``furiosa:auto``: the first card whose device files no other process holds (and no
    earlier entry of the same --backend took), and the words that say which and why."""
    from trainer.backends import furiosa_torch

    dev = furiosa_torch.rngd_dev()
    present = [n for n in present_rngd_cards() if n not in taken]
    if not present:
        # No device files: let the package say what is missing (the driver library).
        try:
            furiosa_torch.probe(0, furiosa_torch.card_device(0))
        except furiosa_torch.NoCard as exc:
            raise furiosa_torch.NoCard(f"backend {spec}: no RNGD card or driver on this host: "
                                       f"{dev} lists no npuN files and {exc.why}") from None
        raise furiosa_torch.NoCard(f"backend {spec}: furiosa-torch reaches a card but {dev} "
                                   "lists no npuN files, so which is free cannot be told; "
                                   "name one: --backend furiosa:N")
    busy = {n: h for n in present if (h := rngd_holders(n))}
    free = [n for n in present if n not in busy]
    if not free:
        raise BackendUnavailable(f"backend {spec}: every RNGD card is held: " + "; ".join(
            _held_by(n, h) for n, h in busy.items()))
    why = "; ".join(_held_by(n, h) for n, h in busy.items())
    return free[0], f"picked card {free[0]}" + (f", as {why}" if why else "")


def parse(specs: str) -> list[Backend]:
    """``cpu,cpu`` -> two CPU cards. Bad specs raise UsageError naming the entry."""
    entries = [s.strip() for s in specs.split(",")]
    if not entries or any(not s for s in entries):
        raise UsageError(f"bad --backend {specs!r}: give a comma list such as cpu or cpu,cpu")
    taken: set[int] = set()
    return [_one(s, taken) for s in entries]


def _one(spec: str, taken: set[int]) -> Backend:
    if spec == "cpu":
        return CpuBackend(spec, torch.device("cpu"))
    if spec == "cpu-compiled":
        return CompiledCpuBackend(spec, torch.device("cpu"), needs_compile=True)
    if spec == "cpu-perturbed":
        return PerturbedCpuBackend(spec, torch.device("cpu"))
    m = re.fullmatch(r"cuda(?::(\d+))?", spec)
    if m:
        if not torch.cuda.is_available():
            raise BackendUnavailable(f"backend {spec}: no CUDA device here (torch {torch.__version__})")
        index = int(m.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise BackendUnavailable(f"backend {spec}: only {torch.cuda.device_count()} CUDA devices")
        return CudaBackend(spec, torch.device("cuda", index))
    m = re.fullmatch(r"furiosa:(auto|\d+)", spec)
    if m:
        return _furiosa(spec, m.group(1), taken)
    raise UsageError(f"unknown backend {spec!r}: give cpu, cuda[:N], furiosa:auto or furiosa:N "
                     "(or cpu-compiled, cpu-perturbed)")
