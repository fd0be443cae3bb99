"""furiosa-torch as the trainer meets it: the package, its device type, cards, probe and sync.

Everything here was read from the released packages (2026.2.0 and 2026.4.0), not guessed:

- The device type is whatever furiosa-torch registers as torch's PrivateUse1 backend
  (``furiosa`` in 2026.3 and later, ``rngd`` in 2026.1 and 2026.2): read it, never spell it.
- A logical device is a group of fused PEs, not a card. ``set_fusion(8)`` before any tensor
  operation makes one device per card (8 PEs); ``get_device_configuration()`` then lists the
  devices, card N being device N. 2026.2 keeps these calls in ``furiosa.torch.native_device``.
- Without a driver the package still imports and lists devices; the first touch of a device
  fails. 2026.4: ``current_stream(dev)`` raises ``RuntimeError(... HAL error ...
  librenegade.so: cannot open shared object file ...)`` and an allocation raises
  ``OutOfMemoryError('failed to allocate 8 bytes')``; 2026.2: ``RuntimeError('Expected
  allocator != nullptr ...')``. Both print the driver error on stdout from native code, so the
  probe captures file descriptors 1 and 2 while it runs.
- ``current_stream(dev).synchronize()`` waits for a device (2026.4); 2026.2 has no such call.
- The torch.compile backend is the callable ``furiosa.torch.backend``; its compiled graphs have
  no autograd, so the training step does not use it (see docs/design.md).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager

import torch

from trainer.errors import BackendUnavailable, UsageError

PACKAGE = "furiosa-torch"
DRIVER_LIBRARY = "librenegade.so"  # what the package dlopens to reach a card
PES_PER_CARD = 8
#: The folder of the cards' device files, /dev/rngd unless this names another (tests: a
#: generated one; the holder scan and furiosa:auto read it).
RNGD_DEV_ENV = "RNGDCTL_RNGD_DEV"

# The package's own words for "there is no driver or no card behind this device".
_NO_DRIVER = re.compile(r"HAL error|cannot open shared object|failed to allocate \d+ bytes"
                        r"|allocator != nullptr|Failed to get device", re.IGNORECASE)
_MISSING_LIB = re.compile(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file")

_fusion_done = False

#: What the trainer (and the op report) compile a card's ops with, over the package's
#: defaults. ``hierarchical_tactic_population`` is the package's documented compile-time switch
#: ("reduces compile time ... slight performance regression may occur ... recommended for large
#: models with many unique shapes"): it prunes the compiler's search for a tactic, not the op
#: or its shapes. Measured here (bench/furiosa_compile_knobs.py, docs/performance.md): plain
#: ``mm`` [32, 64] x [64, 64] for a whole card 159 s by default, 13.7 s with it.
COMPILER_SETTINGS = {"hierarchical_tactic_population": True}


class NoCard(BackendUnavailable):
    """furiosa-torch is here but no card (or no driver) answers; ``why`` says what is missing."""

    def __init__(self, message: str, why: str = ""):
        super().__init__(message)
        self.why = why or message


class UnsupportedOp(UsageError):
    """The package cannot run, or cannot differentiate, an op the training step needs."""


def load():
    """``furiosa.torch``, imported (this registers the device type), or one clear line."""
    try:
        import furiosa.torch as ft
    except ImportError as exc:
        raise BackendUnavailable(
            f"the furiosa backend needs {PACKAGE}, which is not installed in this python "
            f"({sys.executable}: {exc}); it pins torch 2.10.0, so it lives in its own "
            "environment: `make furiosa-env` builds one, `pip install '.[furiosa]'` installs it"
        ) from None
    return ft


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def device_type() -> str:
    """The device type furiosa-torch registered (``furiosa`` or ``rngd``)."""
    load()
    name = torch._C._get_privateuse1_backend_name()
    if name in ("privateuseone", "privateuse1"):
        raise BackendUnavailable(f"{PACKAGE} {version()} is installed but registered no "
                                 "device type with torch")
    return name


def _device_api(ft):
    """Where set_fusion and get_device_configuration live in this release."""
    if hasattr(ft, "set_fusion"):
        return ft
    import furiosa.torch.native_device as nd  # 2026.1 and 2026.2

    return nd


def fuse_cards() -> None:
    """One logical device per card: fuse the 8 PEs. Must come before any tensor operation."""
    global _fusion_done
    if _fusion_done:
        return
    api = _device_api(load())
    try:
        api.set_fusion(PES_PER_CARD)
    except RuntimeError as exc:  # set once per process; someone already did
        if _num_fusion(api.get_fusion()) != PES_PER_CARD:
            raise BackendUnavailable(
                f"{PACKAGE} already runs {_num_fusion(api.get_fusion())} PE(s) per device "
                f"(something touched a device first); a whole card needs {PES_PER_CARD} "
                f"fused ({exc})") from None
    _fusion_done = True


def configure_compiler() -> str:
    """Set ``COMPILER_SETTINGS`` over the package's current compiler config (everything else
    as it was); says what was set. A release without these settings (2026.2's config has
    none of them) compiles with its defaults."""
    try:
        from furiosa.torch import config

        current = config.get_compiler_config()
    except (ImportError, AttributeError):
        return f"{PACKAGE} {version()}'s default compiler settings"
    if not all(hasattr(current, name) for name in COMPILER_SETTINGS):
        return f"{PACKAGE} {version()}'s default compiler settings"
    for name, value in COMPILER_SETTINGS.items():
        setattr(current, name, value)
    config.set_compiler_config(current)
    return settings_text()


def settings_text() -> str:
    return ", ".join(f"{name}={value}" for name, value in COMPILER_SETTINGS.items())


def _num_fusion(fusion) -> int:
    return int(getattr(fusion, "num_fusion", fusion))  # a Fusion in 2026.4, an int in 2026.2


def card_device(card: int) -> torch.device:
    """The torch device of whole card ``card`` (``/dev/rngd/npu<card>``), PEs fused, its ops
    compiled with ``COMPILER_SETTINGS``."""
    fuse_cards()
    configure_compiler()
    fusion, _mesh, devices = _device_api(load()).get_device_configuration()
    per_card = PES_PER_CARD // _num_fusion(fusion)  # devices per card: 1 once fused
    index = card * per_card
    if index >= len(devices):
        raise UsageError(f"card {card}: {PACKAGE} {version()} addresses cards "
                         f"0..{len(devices) // per_card - 1}")
    return torch.device(devices[index])


def probe(card: int, device: torch.device) -> None:
    """Touch the card once; no driver or no card becomes one line naming what is missing."""
    ft = load()
    with _captured_output() as seen:  # the native error lines: read, not shown
        try:
            stream = getattr(ft, "current_stream", None)
            if stream is not None:
                stream(device).synchronize()
            torch.zeros(1, device=device).cpu()
        except (RuntimeError, MemoryError) as exc:
            failure = exc
        else:
            failure = None
    if failure is None:
        return
    text = f"{failure}\n{seen['text']}"
    if not _NO_DRIVER.search(text):
        raise failure
    m = _MISSING_LIB.search(text)
    files = card_files(card)
    present = os.path.exists(files + "mgmt")
    why = (f"{PACKAGE} cannot load the driver library {m.group(1)}" if m else
           f"{PACKAGE} could not open the card ({str(failure).splitlines()[0]})")
    where = f"card {card}, {files}" + ("" if present else " does not exist")
    raise NoCard(f"no RNGD card or driver on this host: {why} ({where})", why)


def rngd_dev() -> str:
    return os.environ.get(RNGD_DEV_ENV) or "/dev/rngd"


def card_files(card: int) -> str:
    """The prefix of card ``card``'s device files: ``/dev/rngd/npu<card>``."""
    return f"{rngd_dev()}/npu{card}"


def synchronize(device: torch.device) -> None:
    """Wait until the card has run everything queued (2026.4's stream call)."""
    stream = getattr(load(), "current_stream", None)
    if stream is not None:
        stream(device).synchronize()
    # 2026.2 has no synchronize: its copies to the host wait for the card.


def compile_backend():
    """The torch.compile backend: the package's callable, never the string "furiosa"."""
    backend = getattr(load(), "backend", None)
    if not callable(backend):
        raise BackendUnavailable(f"{PACKAGE} {version()} has no torch.compile backend")
    return backend


def describe_op_failure(exc: BaseException) -> str | None:
    """One line for an op the package cannot run or differentiate; None for anything else."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    if name in ("UnsupportedOpError", "IncompatibleDmaError", "CompileError"):
        m = _FAILED_OP.search(str(exc))  # the package prints the op's one-node graph
        op = f" ({m.group(1).replace('torch.ops.aten.', 'aten::')})" if m else ""
        return (f"{PACKAGE} {version()} cannot run an op of the training step{op}: "
                f"{one_line(exc)}")
    if isinstance(exc, NotImplementedError):
        if "for autograd" in text:
            return f"{PACKAGE} {version()} cannot differentiate an op of the training step: {text}"
        if "PrivateUse1" in text or device_type_or_none() in text:
            return f"{PACKAGE} {version()} cannot run an op of the training step: {text}"
    if isinstance(exc, (ValueError, RuntimeError, TypeError)) and _raised_in_package(exc):
        # e.g. its gradient build of softmax(x, dim, dtype): torch.export refuses the dtype
        return f"{PACKAGE} {version()} failed on an op of the training step: {one_line(exc)}"
    return None


def _raised_in_package(exc: BaseException) -> bool:
    """Whether the failure passed through furiosa-torch's own Python code (its eager or
    autograd dispatch), not only the trainer's or torch's."""
    import traceback

    ft = sys.modules.get("furiosa.torch")
    root = os.path.dirname(getattr(ft, "__file__", None) or "\0")
    return any(frame.filename.startswith(root + os.sep)
               for frame in traceback.extract_tb(exc.__traceback__))


_FAILED_OP = re.compile(r"call_function\[target=(torch\.ops\.aten\.[\w.]+)\]")


def one_line(exc: BaseException) -> str:
    """An exception's first line, and its root cause's: the package wraps compile errors
    (``UnsupportedOpError: failed to compile`` over ``ValueError: failed to import dfg ...``)."""
    def line(e: BaseException) -> str:
        text = str(e).strip()
        return f"{type(e).__name__}: {text.splitlines()[0][:120] if text else ''}".rstrip(": ")

    root, seen = exc, {id(exc)}
    while (nxt := root.__cause__ or root.__context__) is not None and id(nxt) not in seen:
        root = nxt
        seen.add(id(root))
    return line(exc) if root is exc else f"{line(exc)} ({line(root)})"


def device_type_or_none() -> str:
    name = torch._C._get_privateuse1_backend_name()
    return "\0" if name in ("privateuseone", "privateuse1") else name


@contextmanager
def _captured_output():
    """Send fds 1 and 2 to a temporary file; what was written is in ``["text"]`` afterwards."""
    sys.stdout.flush()
    sys.stderr.flush()
    seen = {"text": ""}
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield seen
        finally:
            sink.seek(0)
            seen["text"] = sink.read().decode(errors="replace")
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def keep_records_clean() -> None:
    """Native code logs to fd 1, where the records go: give sys.stdout its own copy of fd 1
    and point fd 1 at stderr, so such logs land among the human lines."""
    sys.stdout.flush()
    records = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = open(records, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - for life


def smi_versions() -> dict[str, str]:
    """The RNGD driver's and the cards' firmware versions, from furiosa-smi's Python binding.

    Only where the ``furiosa-smi`` package is installed and answers: without it, or without a
    card (``DeviceNotFoundError``), nothing; a version is a fact for the note, never a reason
    to stop a run.
    """
    try:
        import furiosa_smi
    except ImportError:
        return {}
    out: dict[str, str] = {}
    try:
        out["rngd driver"] = _version_text(furiosa_smi.driver_info())
        firmware = sorted({_version_text(_read(d, "firmware_version"))
                           for d in furiosa_smi.list_devices()})
    except Exception:  # noqa: BLE001 - SmiError and its kin: no card, no driver, no access
        return out
    if firmware:
        out["rngd firmware"] = ", ".join(firmware)
    return out


def _read(obj, name: str):
    """An attribute of a binding object, whether exposed as a property or as a method."""
    value = getattr(obj, name, None)
    return value() if callable(value) else value


def _version_text(v) -> str:
    """furiosa-smi's VersionInfo (major, minor, patch, prerelease) as 2026.4.0[-rc1]."""
    if _read(v, "major") is None:
        return str(v)
    text = f"{_read(v, 'major')}.{_read(v, 'minor')}.{_read(v, 'patch')}"
    pre = _read(v, "prerelease")
    return f"{text}-{pre}" if pre else text
