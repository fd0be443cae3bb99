"""The step-record contract between the trainer and the daemon.

The trainer writes one JSON object per line; the daemon parses them. This
module is the only place that knows the shape of a record, and it must stay
free of torch so that the daemon, the CLI and the TUI can import it.

Kinds:

- ``start``: one per training pass. A Job with ``--baseline`` runs two passes
  (``baseline``, then ``main``), each opened by its own ``start`` record.
- ``step``: one per optimizer step of a pass.
- ``event``: anything worth a line in the note (a compile, a retry, a warning,
  a checkpoint written, a resume: ``EVENTS`` names the ones readers act on).
- ``eval``: the held-out loss of a pass at one step, over the whole held-out
  set (schema 2). Never a step: its time is not in any step's ``step_s``.
- ``end``: the last record of the process: status and error text.

Each record carries the schema version ``v`` of its own shape: the four kinds
of schema 1 still write 1 (their shape did not change), ``eval`` writes 2, so
an older reader keeps reading every step of a newer trainer.

Parsing never raises: a line that is not JSON, or JSON without ``kind``, is a
log line; JSON with a known ``kind`` but the wrong shape is a ``Malformed``
record, which the daemon counts and keeps as an event. A record that parses is
safe to store as it is: integers fit SQLite's 64 bits, ``time``, ``step_s``
and ``lr`` are finite, no string holds a lone surrogate, and no value nests
deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

SCHEMA_VERSION = 2
#: The version each kind is written with: the schema that gave it its shape.
KIND_VERSION = {"start": 1, "step": 1, "event": 1, "end": 1, "eval": 2}

#: Phase names in a step record's ``phases``, in seconds. The trainer times
#: each phase on the host clock, one after another, so they add up to
#: ``step_s`` (within 5 %; the remainder is what no phase claimed).
PHASES = (
    "fwd_bwd",  # device forward and backward, all micro-batches, all cards
    "upload",  # offloaded layers' compute weights host -> device
    "download",  # offloaded layers' gradients device -> host
    "host_optim",  # fused AdamW on the host for offloaded layers
    "device_optim",  # AdamW on the card for resident layers (+ embed/head)
    "wait",  # synchronisation waits that no phase above claimed
)

#: A key of an all-offload pass's ``start`` config: the optimizer's cost per
#: layer, timed by trainer/engine/calibrate.py on scratch buffers shaped like one
#: layer, before the pass's first step. Seconds: ``host_per_layer_s`` and
#: ``host_call_s`` (the host's fused AdamW with the clip norm: one more layer,
#: and the call's own fixed part) over ``reps`` timed pairs, and
#: ``device_per_layer_s`` and ``device_call_s`` (the same on card 0) over
#: ``device_reps``. A place not timed is left out (``device_not_timed`` says
#: why for card 0). The step model (daemon/stepmodel/fit.py) reads it to split
#: the host optimizer into a fixed and a per-layer part and to price a
#: resident layer on the cards.
OPTIM_CALIBRATION = "optim_calibration"

#: A ``start`` record's ``data`` (optional: absent or ``{}`` in records of older trainers, and
#: an older reader skips it, so ``start`` stays at v 1): the training data as the pass reads
#: it. ``source`` (``synthetic``, ``nsmc``, ``jsonl``, ``parquet``, ``datasets``), ``form``
#: (``synthetic``, ``prompt``, ``chat``), ``examples`` (training examples), ``rows`` (packed
#: rows with ``--pack``, else one an example), ``seq_len``, ``packed``, ``real_tokens`` (the
#: examples' tokens, padding not counted), ``padding_share`` (of ``rows`` x ``seq_len``),
#: ``fitted`` ({how: examples} made to fit ``--seq-len``: ``prompt_cut``, ``turns_dropped``,
#: ``answer_cut``, ``skipped``: trainer/data/batches.py ``Fitted``), ``cache`` (``read``,
#: ``written``, ``not written``, or null). A ``step``'s ``tokens`` are its real tokens too.
DATA_KEYS = ("source", "form", "examples", "rows", "seq_len", "packed", "real_tokens",
             "padding_share", "fitted", "cache")

#: ``end`` statuses the trainer writes. ``preempted``: SIGTERM (a deadline, a
#: cancel, a node drain) stopped it after a whole step and a checkpoint, from
#: which ``--resume`` goes on; ``cancelled``: the same without an output folder.
END_STATUSES = ("ok", "error", "oom", "cancelled", "preempted")

#: Event names that readers act on (``Event.event``), with what ``data`` holds:
#:
#: - ``checkpoint``: one was written. ``path``, ``step`` (the main pass's),
#:   ``position`` ({pass label: steps done}), ``bytes``, ``seconds``.
#: - ``checkpoint_failed``: one could not be written (a full disk); the one
#:   before it is kept. ``path``, ``step``, ``error``, ``action``
#:   (``continue`` or ``stop``).
#: - ``resume``: the process went on from a checkpoint. ``path``, ``step``,
#:   ``position``, ``seconds`` (reading and checking it).
#: - ``checkpoint_bad``: a complete-looking checkpoint failed its check and
#:   was passed over for an older one. ``path``, ``error``.
#: - ``saved``: the output model was written. ``path``, ``format`` (``full``,
#:   ``peft`` or ``merged``), ``files`` ({name: sha256}), ``bytes``, ``seconds``.
CHECKPOINT, CHECKPOINT_FAILED, RESUME, CHECKPOINT_BAD, SAVED = (
    "checkpoint", "checkpoint_failed", "resume", "checkpoint_bad", "saved")
EVENTS = (CHECKPOINT, CHECKPOINT_FAILED, RESUME, CHECKPOINT_BAD, SAVED)

#: Keys of an ``end`` record's ``data`` beside ``steps``: ``phases`` (seconds
#: outside every step: ``eval_s``, ``checkpoint_s``, ``save_s``, ``resume_s``),
#: ``model_dir`` (the saved model, when one was written) and ``checkpoint``
#: (the newest complete checkpoint, when there is one).
END_PHASES = ("eval_s", "checkpoint_s", "save_s", "resume_s")

#: Exit codes the trainer uses, so a launcher can tell them apart without the
#: ``end`` record (the log may be truncated).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_OOM = 3

#: Pass labels. ``main`` is the configuration the user asked for.
MAIN = "main"
BASELINE = "baseline"


# === Records =================================================================
# Each record class is a frozen dataclass, made one on the first instance of any of them
# rather than at import (``_Record``). Making a dataclass compiles its methods, about 4 million
# instructions for each of these seven: every module that reads this one's names paid that at
# import, `rngdctl submit`, `runs` and `show` included, which make no record (issue 33: 8 %
# of `runs`).

_UNMADE: list[type] = []  # record classes not made dataclasses yet
_MAKING = threading.Lock()


class _Record:
    """The base of the record classes: each is a frozen dataclass from the first instance of
    any of them on (the same class object; nothing reads their fields before that)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _UNMADE.append(cls)

    def __init__(self, *args, **kwargs) -> None:
        # Only until the classes are made: dataclass() gives each its own __init__, which
        # comes before this one (and another thread meanwhile waits here for the lock).
        with _MAKING:
            while _UNMADE:
                dataclass(frozen=True)(_UNMADE.pop())
        type(self).__init__(self, *args, **kwargs)


class Start(_Record):
    """A pass begins: its full configuration, versions, code commit, host, and its data
    (``DATA_KEYS``; empty when not known)."""

    config_label: str
    config: dict
    run_id: str | None = None
    versions: dict = field(default_factory=dict)
    git: str | None = None
    host: str | None = None
    time: float | None = None
    data: dict = field(default_factory=dict)


class Step(_Record):
    """One optimizer step of one pass."""

    config_label: str
    step: int
    loss: float
    step_s: float
    tokens: int  # the real tokens of its micro-batches (padding not counted)
    lr: float
    phases: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    time: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def loss_is_finite(self) -> bool:
        return math.isfinite(self.loss)


class Event(_Record):
    """Something worth a line in the note."""

    event: str
    message: str
    config_label: str | None = None
    data: dict = field(default_factory=dict)
    time: float | None = None


class End(_Record):
    """The process is done: ``status`` is one of END_STATUSES."""

    status: str
    error: str | None = None
    config_label: str | None = None
    data: dict = field(default_factory=dict)
    time: float | None = None


class Eval(_Record):
    """The held-out loss of one pass after ``step`` optimizer steps (0: before any)."""

    config_label: str
    step: int
    loss: float
    tokens: int  # label tokens the loss is the mean over
    examples: int
    seconds: float  # the evaluation's own wall time
    time: float | None = None

    @property
    def perplexity(self) -> float:
        try:
            return math.exp(self.loss)
        except OverflowError:
            return math.inf


class LogLine(_Record):
    """A line that is not a record: plain trainer output."""

    text: str


class Malformed(_Record):
    """JSON that names a record kind but does not have its shape."""

    text: str
    reason: str


Record = Start | Step | Event | End | Eval
Parsed = Start | Step | Event | End | Eval | LogLine | Malformed


# === Writing (trainer side) ==================================================


def _number(x: float) -> float | str:
    # JSON has no NaN or infinity; write them as strings the parser reads back.
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def to_dict(record: Record) -> dict:
    """The JSON object for ``record``, with ``kind`` and ``v``."""
    now = record.time if record.time is not None else time.time()
    if isinstance(record, Start):
        return {
            "kind": "start",
            "v": KIND_VERSION["start"],
            "config_label": record.config_label,
            "run_id": record.run_id,
            "config": record.config,
            "versions": record.versions,
            "git": record.git,
            "host": record.host,
            "time": now,
            **({"data": record.data} if record.data else {}),
        }
    if isinstance(record, Step):
        d = {
            "kind": "step",
            "v": KIND_VERSION["step"],
            "config_label": record.config_label,
            "step": record.step,
            "loss": _number(float(record.loss)),
            "step_s": record.step_s,
            "tokens": record.tokens,
            "lr": record.lr,
            "phases": record.phases,
            "memory": record.memory,
            "time": now,
        }
        d.update(record.extra)
        return d
    if isinstance(record, Event):
        return {
            "kind": "event",
            "v": KIND_VERSION["event"],
            "event": record.event,
            "message": record.message,
            "config_label": record.config_label,
            "data": record.data,
            "time": now,
        }
    if isinstance(record, End):
        return {
            "kind": "end",
            "v": KIND_VERSION["end"],
            "status": record.status,
            "error": record.error,
            "config_label": record.config_label,
            "data": record.data,
            "time": now,
        }
    if isinstance(record, Eval):
        return {
            "kind": "eval",
            "v": KIND_VERSION["eval"],
            "config_label": record.config_label,
            "step": record.step,
            "loss": _number(float(record.loss)),
            "perplexity": _number(record.perplexity),
            "tokens": record.tokens,
            "examples": record.examples,
            "seconds": record.seconds,
            "time": now,
        }
    raise TypeError(f"not a record: {record!r}")


def describe_data(data: dict) -> str:
    """One line of a start record's ``data``: the trainer's log and the daemon's event say it
    in the same words. Keys that are missing or of another type are left out."""
    def num(key):
        value = data.get(key)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else None

    examples, rows, share = num("examples"), num("rows"), num("padding_share")
    words = [f"{examples:,} {data.get('form') or ''} examples".replace("  ", " ")
             if examples is not None else "data"]
    if rows is not None:
        words.append(f"in {rows:,} {'packed ' if data.get('packed') else ''}rows"
                     + (f" of {num('seq_len'):,}" if num("seq_len") else ""))
    if share is not None:
        words.append(f"padding {share:.1%}")
    fitted = data.get("fitted") if isinstance(data.get("fitted"), dict) else {}
    made = [f"{n:,} {how.replace('_', ' ')}" for how, n in fitted.items()
            if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    line = " ".join(words[:2]) + "".join(f", {w}" for w in words[2:])
    if made:
        line += f"; longer than --seq-len: {', '.join(made)}"
    if isinstance(data.get("cache"), str):
        line += f" (cache: {data['cache']})"
    return line


def dumps(record: Record) -> str:
    """One line of JSON, without the newline."""
    return json.dumps(to_dict(record), ensure_ascii=False, separators=(",", ":"))


class RecordWriter:
    """Writes records to several streams (stdout and a log file), flushing each line."""

    def __init__(self, *streams: IO[str]):
        self.streams = [s for s in streams if s is not None]

    def write(self, record: Record) -> None:
        line = dumps(record) + "\n"
        for stream in self.streams:
            stream.write(line)
            stream.flush()


# === Parsing (daemon side) ===================================================

#: The deepest nesting of objects and lists a record may hold. Real records
#: nest 3 levels; the limit keeps every later reader (json.dumps in the store,
#: repr in a message) far from Python's recursion limit.
MAX_DEPTH = 32

#: SQLite stores signed 64-bit integers; a larger one cannot be bound.
INT64_MAX = 2**63 - 1

_SURROGATE = re.compile("[\ud800-\udfff]")

_STEP_FIELDS = {"step": int, "loss": float, "step_s": float, "tokens": int, "lr": float}
_CORE_STEP_KEYS = {"kind", "v", "config_label", "step", "loss", "step_s", "tokens", "lr",
                   "phases", "memory", "time"}


def _as_float(value: Any) -> float:
    if value.__class__ is float:  # what json.loads gives for a number with a point: as is
        return value
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, str):
        if value.lower() in ("nan", "inf", "+inf", "-inf", "infinity", "-infinity"):
            return float(value)
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def _as_finite(value: Any, name: str) -> float:
    x = _as_float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} is {x}, not a finite number")
    return x


def _as_int(value: Any) -> int:
    if value.__class__ is int and -INT64_MAX - 1 <= value <= INT64_MAX:  # json.loads': as is
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{value!r} is not an integer")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{value!r} is not an integer")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"{value!r} does not fit in 64 bits")
    return int(value)


def _clean(value: Any, depth: int = 0) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD; ValueError past MAX_DEPTH.

    JSON's ``\\ud800`` escape decodes to a string UTF-8 cannot encode, which
    SQLite (and every file write) would refuse.
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if not value.isascii() else value
    if isinstance(value, (dict, list)):
        if depth >= MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, list):
            return [_clean(v, depth + 1) for v in value]
        return {_clean(k, depth + 1): _clean(v, depth + 1) for k, v in value.items()}
    return value


def _clean_already(text: str) -> bool:
    """Whether the JSON ``text`` decodes to what ``_clean`` would give back unchanged: ASCII
    with no ``\\u`` escape has no surrogate to replace, and fewer brackets than MAX_DEPTH
    cannot nest deeper. The trainer's step lines all are: ingest skips a walk of each."""
    return (text.isascii() and "\\u" not in text
            and text.count("{") + text.count("[") <= MAX_DEPTH)


def _opt_str(obj: dict, key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _phases(value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError("phases is not an object")
    return {str(k): _as_float(v) for k, v in value.items()}


def _label(obj: dict, default: str | None = MAIN) -> str | None:
    label = obj.get("config_label")
    if label is None and isinstance(obj.get("config"), str):
        label = obj["config"]  # records of schema 1's first drafts named the pass "config"
    if label is None:
        return default
    if not isinstance(label, str):
        raise TypeError("config_label is not a string")
    return label


def _time(obj: dict) -> float | None:
    t = obj.get("time")
    return None if t is None else _as_finite(t, "time")


def parse_line(line: str) -> Parsed:
    """Parse one line (without its newline). Never raises."""
    text = _clean(line.rstrip("\r\n"))
    stripped = text.strip()
    if not stripped.startswith("{"):
        return LogLine(text)
    try:
        obj = json.loads(stripped)
    except RecursionError:
        return Malformed(text, "JSON nested too deep to read")
    except ValueError:
        return LogLine(text)
    if not isinstance(obj, dict) or "kind" not in obj:
        return LogLine(text)
    try:
        return _from_dict(obj if _clean_already(stripped) else _clean(obj))
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        return Malformed(text, _reason(obj, exc))


def _reason(obj: dict, exc: Exception) -> str:
    kind = obj.get("kind")
    kind = kind if isinstance(kind, str) else type(kind).__name__
    return _clean(f"{kind[:40]} record: {exc}"[:300])


def _from_dict(obj: dict) -> Parsed:
    kind = obj["kind"]
    version = obj.get("v", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(f"schema version {version!r} is newer than {SCHEMA_VERSION}")
    if kind == "start":
        config = obj.get("config")
        if not isinstance(config, dict):
            raise ValueError("config is not an object")
        versions = obj.get("versions") or {}
        if not isinstance(versions, dict):
            raise ValueError("versions is not an object")
        data = obj.get("data") or {}
        if not isinstance(data, dict):
            raise ValueError("data is not an object")
        return Start(
            config_label=_label(obj),
            config=config,
            run_id=None if obj.get("run_id") is None else str(obj["run_id"]),
            versions=versions,
            git=_opt_str(obj, "git"),
            host=_opt_str(obj, "host"),
            time=_time(obj),
            data=data,
        )
    if kind == "step":
        if not obj.keys() >= _STEP_FIELDS.keys():  # one comparison of key sets when all are
            missing = [k for k in _STEP_FIELDS if k not in obj]
            raise KeyError(f"missing {', '.join(missing)}")
        step = _as_int(obj["step"])
        if step < 1:
            raise ValueError(f"step {step} < 1")
        tokens = _as_int(obj["tokens"])
        if tokens < 0:
            raise ValueError(f"tokens {tokens} < 0")
        memory = obj.get("memory") or {}
        if not isinstance(memory, dict):
            raise ValueError("memory is not an object")
        return Step(
            config_label=_label(obj),
            step=step,
            loss=_as_float(obj["loss"]),
            step_s=_as_finite(obj["step_s"], "step_s"),
            tokens=tokens,
            lr=_as_finite(obj["lr"], "lr"),
            phases=_phases(obj.get("phases")),
            memory=memory,
            time=_time(obj),
            extra={k: v for k, v in obj.items() if k not in _CORE_STEP_KEYS},
        )
    if kind == "event":
        data = obj.get("data") or {}
        if not isinstance(data, dict):
            raise ValueError("data is not an object")
        return Event(
            event=str(obj.get("event", "event")),
            message=str(obj.get("message", "")),
            config_label=_label(obj, default=None),
            data=data,
            time=_time(obj),
        )
    if kind == "end":
        status = obj.get("status")
        if not isinstance(status, str) or not status:
            raise ValueError("status is missing")
        data = obj.get("data") or {}
        if not isinstance(data, dict):
            raise ValueError("data is not an object")
        error = obj.get("error")
        return End(
            status=status,
            error=None if error is None else str(error),
            config_label=_label(obj, default=None),
            data=data,
            time=_time(obj),
        )
    if kind == "eval":
        step, tokens, examples = (_as_int(obj[k]) for k in ("step", "tokens", "examples"))
        if step < 0 or tokens < 0 or examples < 0:
            raise ValueError("step, tokens and examples must be 0 or more")
        return Eval(
            config_label=_label(obj),
            step=step,
            loss=_as_float(obj["loss"]),
            tokens=tokens,
            examples=examples,
            seconds=_as_finite(obj["seconds"], "seconds"),
            time=_time(obj),
        )
    raise ValueError(f"unknown kind {kind!r}")


class LineSplitter:
    """Turns chunks of bytes into complete lines; a partial last line waits.

    ``offset`` counts the bytes of complete lines consumed so far, so a
    follower can store it and resume from exactly there.
    """

    def __init__(self, offset: int = 0):
        self.offset = offset
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._pending + chunk
        *complete, self._pending = data.split(b"\n")
        lines = []
        for raw in complete:
            self.offset += len(raw) + 1
            lines.append(raw.decode("utf-8", errors="replace"))
        return lines

    @property
    def pending(self) -> bytes:
        return self._pending


def parse_lines(lines: Iterable[str]) -> list[Parsed]:
    return [parse_line(line) for line in lines]
