"""Backends: where a card's layers run. One small interface, three kinds.

``--backend`` is a comma list, one entry per card, in layer order:

- ``cpu``: the host itself plays the card. Uploads and downloads are real
  copies between the host's master buffers and the card's compute buffers.
- ``cuda`` or ``cuda:N``: an NVIDIA GPU.
- ``furiosa:N`` or ``furiosa:auto``: a Furiosa RNGD card through furiosa-torch
  (device ``rngd:N``); ``auto`` picks a card no other process holds open.
- ``cpu-compiled``: a CPU card that runs every graph through ``torch.compile``
  (the ``aot_eager`` backend: forward and backward graphs captured, static
  shapes, no code generation), the way a furiosa card does. It exercises the
  compiled path (``trainer compile``, graph reuse across layers) on the host.
- ``cpu-perturbed``: a CPU card that adds relative noise of 1e-3 to every
  tensor it receives. It exists so that ``trainer check`` can be shown to fail.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass

import torch

from trainer.errors import BackendUnavailable, UsageError

FURIOSA_PACKAGE = "furiosa-torch"
FURIOSA_WHERE = "Furiosa's own package index (it is not on PyPI; see the FuriosaAI SDK docs)"
FURIOSA_MODULES = ("furiosa_torch", "furiosa.torch")  # the import names releases have used


@dataclass
class Backend:
    """One card: a torch device plus what the engine needs to know about it."""

    spec: str  # as given on the command line
    device: torch.device
    fused_adamw: bool = True  # torch's fused AdamW kernel runs on this device
    needs_compile: bool = False  # graphs are compiled before they run (furiosa)

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
    """An RNGD card through furiosa-torch: device ``rngd:N``, graphs compiled with torch.compile."""

    def synchronize(self) -> None:
        mod = getattr(torch, "rngd", None)
        if mod is not None and hasattr(mod, "synchronize"):
            mod.synchronize(self.device)

    def peak_gb(self) -> float | None:
        mod = getattr(torch, "rngd", None)
        if mod is not None and hasattr(mod, "max_memory_allocated"):
            return mod.max_memory_allocated(self.device) / 1e9
        return None

    def reset_peak(self) -> None:
        mod = getattr(torch, "rngd", None)
        if mod is not None and hasattr(mod, "reset_peak_memory_stats"):
            mod.reset_peak_memory_stats(self.device)

    def compile(self, fn):
        return torch.compile(fn, backend=_furiosa_compile_backend(), dynamic=False)


def _import_furiosa():
    for name in FURIOSA_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise BackendUnavailable(
        f"the furiosa backend needs {FURIOSA_PACKAGE}, which is not installed here; "
        f"install it from {FURIOSA_WHERE}"
    )


def _furiosa_compile_backend():
    mod = _import_furiosa()
    return getattr(mod, "compile_backend", None) or "furiosa"


def held_rngd_cards(proc: str = "/proc") -> set[int]:
    """Card numbers whose device files (``/dev/rngd/npuN...``) some process has open."""
    held: set[int] = set()
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit() and p != me]
    except OSError:
        return held
    for pid in pids:
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            m = re.match(r"/dev/rngd/npu(\d+)", target)
            if m:
                held.add(int(m.group(1)))
    return held


def present_rngd_cards(dev: str = "/dev/rngd") -> list[int]:
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted({int(m.group(1)) for n in names if (m := re.match(r"npu(\d+)mgmt$", n))})


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
        _import_furiosa()
        if m.group(1) == "auto":
            held = held_rngd_cards()
            free = [n for n in present_rngd_cards() if n not in held and n not in taken]
            if not free:
                raise BackendUnavailable(f"backend {spec}: no RNGD card is free (held: {sorted(held)})")
            index = free[0]
        else:
            index = int(m.group(1))
        taken.add(index)
        return FuriosaBackend(spec, torch.device("rngd", index), fused_adamw=False,
                              needs_compile=True)
    raise UsageError(f"unknown backend {spec!r}: give cpu, cuda[:N], furiosa:auto or furiosa:N "
                     "(or cpu-compiled, cpu-perturbed)")
