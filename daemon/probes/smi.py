"""Card readings from furiosa-smi's Python binding (the ``furiosa-smi`` package, module
``furiosa_smi``, 2026.4), read in a child process with a timeout.

The binding reads sysfs and may block in the driver, so it never runs in the
daemon's, the agent's or the CLI's own process: ``CHILD`` runs in ``python -S -c``
(this process's path, without site's start-up), prints one JSON line and exits; a
hang costs one timeout, a crash one line.
Every failure is one line (``CardsReading.why``): not installed (with the pip
command), no card (the binding's own ``DeviceNotFoundError``), a hang, a crash.
A reading that fails on one card (say its memory) leaves that value None and
names the error in the card's ``errors``; the card's other readings stand.

What the binding returns (checked on the real 2026.4.0 module, see docs/design.md):
every reading is a method; ``device_temperature()`` has float ``soc_peak`` and
``ambient`` (°C); ``power_consumption()`` is a float in W and ``power_limit()`` an
int in mW; ``memory_usage()`` is a dict of core range to ``MemoryInfo``
(``total_bytes``, ``in_use_bytes``), one per PE; ``performance_counter()`` a
dict of core to ``PePerformanceCounter`` (``cycle_count``,
``task_execution_cycle``; zero on a core nobody occupies);
``throttle_reason()`` a list of ``ThrottleReason``; ``core_status()`` a dict of
core to ``CoreStatus``.

Utilization is "since the last reading": ``PePerformanceCounter.utilization_since``
needs the previous reading's object, which does not outlive the child, so the
parent keeps each core's two counters and computes the same ratio (task cycles
over cycles, per core; the card's is the mean over its cores, an idle core 0).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

#: Seconds one reading (the whole child process) may take.
TIMEOUT = 5.0
#: The release the reader is written against (``smi`` extra in pyproject.toml).
RELEASE = "2026.4.0"
INSTALL = "pip install furiosa-smi (rngdctl's extra: pip install 'rngdctl[smi]')"

#: Every name the reader uses on the binding, by the real module's class that has it
#: (tests/spine/test_smi.py checks each against the installed 2026.4 module).
READINGS = {
    "furiosa_smi": ("list_devices", "driver_info", "__version__", "ThrottleReason",
                    "CoreStatus"),
    "Device": ("device_name", "uuid", "serial", "firmware_version", "liveness",
               "device_temperature", "power_consumption", "power_limit", "memory_usage",
               "performance_counter", "throttle_reason", "core_status", "core_num",
               "governor_profile"),
    "DeviceTemperature": ("soc_peak", "ambient"),
    "MemoryInfo": ("total_bytes", "in_use_bytes"),
    "PePerformanceCounter": ("cycle_count", "task_execution_cycle"),
    "ThrottleReason": ("Idle", "ThermalSlowdown", "AppPowerCap", "AppClockCap", "HwClockCap",
                       "HwBusLimit", "HwPowerCap", "GovClockCap", "OtherReason", "Unknown"),
    "CoreStatus": ("Occupied", "Available"),
}
THROTTLE_REASONS = READINGS["ThrottleReason"]
#: Throttle reasons that say the card itself is in trouble: the health gate blocks on them.
#: Idle is the card resting; the App and Gov caps are limits someone set.
HARDWARE_THROTTLE = frozenset({"ThermalSlowdown", "HwClockCap", "HwBusLimit", "HwPowerCap"})
#: Throttle reasons that do not slow a run: a card "throttled" in a note has another one.
BENIGN_THROTTLE = frozenset({"Idle"})

# The child: one JSON line. It names the reason by the enum's own comparison, so the
# words come from ours and the identity from the binding. It writes the JSON itself, with
# json's own string quoting (_json's C function): importing json imports re, which
# doubled the child's start-up without site (issue 27).
CHILD = r"""
import sys
try:
    from _json import encode_basestring_ascii as quote
except ImportError:
    from json.encoder import py_encode_basestring_ascii as quote
INF = float("inf")
def dumps(v):
    if v is None or v is True or v is False:
        return "null" if v is None else "true" if v else "false"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        if v != v:
            return "NaN"
        return "Infinity" if v == INF else "-Infinity" if v == -INF else float.__repr__(v)
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, dict):
        return "{" + ", ".join(quote(str(k)) + ": " + dumps(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(dumps(x) for x in v) + "]"
    raise TypeError(f"{type(v).__name__} is not JSON")
def out(**kw):
    print(dumps(kw), flush=True)
    sys.exit(0)
try:
    import furiosa_smi as smi
except ImportError as exc:
    out(missing=f"{type(exc).__name__}: {exc}")
version = str(getattr(smi, "__version__", "?"))
REASONS = sys.argv[1].split(",")
def why(exc):
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
def read(card, errors, key, call):
    try:
        card[key] = call()
    except Exception as exc:
        card[key] = None
        errors[key] = why(exc)
try:
    devices = smi.list_devices()
except Exception as exc:
    out(version=version, error=why(exc))
if not devices:
    try:
        driver = str(smi.driver_info())
    except Exception as exc:
        out(version=version, none=why(exc))
    out(version=version, none=f"list_devices() is empty; driver {driver}")
try:
    driver = str(smi.driver_info())
except Exception as exc:
    driver = None
cards = []
for d in devices:
    card, errors = {}, {}
    read(card, errors, "card", lambda: str(d.device_name()))
    read(card, errors, "uuid", lambda: str(d.uuid()))
    read(card, errors, "serial", lambda: str(d.serial()))
    read(card, errors, "firmware", lambda: str(d.firmware_version()))
    read(card, errors, "alive", lambda: bool(d.liveness()))
    def temperature():
        t = d.device_temperature()
        return [float(t.soc_peak()), float(t.ambient())]
    read(card, errors, "temperature", temperature)
    read(card, errors, "power_w", lambda: float(d.power_consumption()))
    read(card, errors, "power_limit_w", lambda: int(d.power_limit()) / 1000.0)
    def memory():
        usage = list(d.memory_usage().values())
        return [sum(int(m.in_use_bytes()) for m in usage), sum(int(m.total_bytes()) for m in usage)]
    read(card, errors, "memory", memory)
    def counters():
        return {str(core): [int(c.cycle_count()), int(c.task_execution_cycle())]
                for core, c in d.performance_counter().items()}
    read(card, errors, "counters", counters)
    def throttle():
        return [name for r in d.throttle_reason() for name in REASONS
                if r == getattr(smi.ThrottleReason, name)]
    read(card, errors, "throttle", throttle)
    read(card, errors, "cores_occupied", lambda: sorted(
        int(core) for core, s in d.core_status().items() if s == smi.CoreStatus.Occupied))
    read(card, errors, "cores", lambda: int(d.core_num()))
    read(card, errors, "governor", lambda: str(d.governor_profile()))
    card["errors"] = errors
    cards.append(card)
out(version=version, driver=driver, cards=cards)
"""


@dataclass(frozen=True)
class CardsReading:
    """One reading of this host's cards, or why there is none (``why``, one line)."""

    cards: tuple[dict, ...] = ()
    why: str | None = None
    version: str | None = None
    driver: str | None = None
    #: A hang or a crash (worth waiting before the next try), not a steady "no card".
    failed: bool = False

    def as_dict(self) -> dict:
        return {"cards": [dict(c) for c in self.cards], "why": self.why,
                "version": self.version, "driver": self.driver}


def _child_failure(code: int, stderr: str) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"furiosa_smi crashed (killed by {name}): no card readings"
    last = (stderr.strip().splitlines() or [f"exit {code}"])[-1][:160]
    return f"furiosa_smi exited {code} ({last}): no card readings"


class Pending:
    """A reading under way in its child process: ``result()`` waits for it (its timeout
    counted from the start), so a caller can do other work meanwhile."""

    def __init__(self, python=None, timeout: float = TIMEOUT, env: dict | None = None,
                 prefix=()):
        if python is None:
            python, env = _this_python(env)
        self.argv = [*prefix, *([python] if isinstance(python, str) else python),
                     "-c", CHILD, ",".join(THROTTLE_REASONS)]
        self.timeout = timeout
        self._started = time.monotonic()
        self._error: OSError | None = None
        try:
            self._process = subprocess.Popen(self.argv, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                             text=True, env=env)
        except OSError as exc:
            self._process, self._error = None, exc

    def result(self) -> CardsReading:
        if self._process is None:
            return CardsReading(why=f"cannot run {self.argv[0]} for furiosa_smi: "
                                    f"{self._error.strerror}", failed=True)
        left = max(0.0, self.timeout - (time.monotonic() - self._started))
        try:
            stdout, stderr = self._process.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            return CardsReading(why=f"furiosa_smi gave no reading within {self.timeout:g} s "
                                    f"(the binding hung, in the driver?): no card readings",
                                failed=True)
        return parse(self._process.returncode, stdout, stderr)


def _this_python(env: dict | None) -> tuple[list[str], dict]:
    """This interpreter without ``site`` (``-S``), given this process's ``sys.path`` (site's
    work, done) after the PYTHONPATH it is handed: the child finds the binding where this
    process would, and skips site's start-up, a third of its CPU in a venv (issue 27)."""
    env = dict(os.environ if env is None else env)
    given = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*given, *(p for p in sys.path if p)])
    return [sys.executable, "-S"], env


def read_once(python=None, timeout: float = TIMEOUT, env: dict | None = None,
              prefix=()) -> CardsReading:
    """One child-process reading. ``python``: the interpreter (a path or an argv list;
    default this one); ``prefix``: argv put before it (tests run it in a namespace)."""
    return Pending(python, timeout, env, prefix).result()


def parse(returncode: int, stdout: str, stderr: str) -> CardsReading:
    """The child's answer as a reading, or its one line of why not."""
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if not isinstance(answer, dict):
        return CardsReading(why=_child_failure(returncode, stderr), failed=True)
    version = answer.get("version")
    if "missing" in answer:
        return CardsReading(why=f"furiosa-smi is not installed ({answer['missing']}): {INSTALL}")
    if "none" in answer:
        return CardsReading(why=f"no RNGD card found by furiosa-smi {version} ({answer['none']})",
                            version=version)
    if "error" in answer:
        return CardsReading(why=f"furiosa-smi {version} cannot list the cards ({answer['error']})",
                            version=version)
    cards = tuple(_card(c) for c in answer.get("cards") or [] if isinstance(c, dict))
    return CardsReading(cards=cards, version=version, driver=answer.get("driver"))


def _card(raw: dict) -> dict:
    """The child's card, flattened to the fields every reader shows and stores."""
    temp = raw.get("temperature") or [None, None]
    memory = raw.get("memory") or [None, None]
    return {
        "card": raw.get("card") or "?", "uuid": raw.get("uuid"), "serial": raw.get("serial"),
        "firmware": raw.get("firmware"), "alive": raw.get("alive"),
        "temp_c": temp[0], "ambient_c": temp[1],
        "power_w": raw.get("power_w"), "power_limit_w": raw.get("power_limit_w"),
        "memory_used": memory[0], "memory_total": memory[1],
        "util": None, "counters": raw.get("counters"),
        "throttle": raw.get("throttle"), "cores_occupied": raw.get("cores_occupied"),
        "cores": raw.get("cores"), "governor": raw.get("governor"),
        "errors": raw.get("errors") or {},
    }


def utilization(now: dict | None, before: dict | None, cores: int | None) -> float | None:
    """The card's utilization between two readings of its counters (core -> [cycles, task
    cycles]): each core's task cycles over its cycles, as ``utilization_since`` computes
    it; the card's the mean over its ``cores`` (a core not counting: 0). None without a
    previous reading."""
    if not now or before is None:
        return None
    total = 0.0
    for core, (cycles, task) in now.items():
        prev = before.get(core)
        if not prev:
            continue
        d_cycles, d_task = cycles - prev[0], task - prev[1]
        if d_cycles > 0 and d_task >= 0:  # counters that went back: a reset, no reading
            total += min(1.0, d_task / d_cycles)
    return total / max(1, cores or len(now))


class CardReader:
    """Readings one after another, each card's utilization since the previous one."""

    def __init__(self, python=None, timeout: float = TIMEOUT, env: dict | None = None,
                 prefix=()):
        self.python, self.timeout, self.env, self.prefix = python, timeout, env, tuple(prefix)
        self._counters: dict[str, dict] = {}

    def start(self) -> Pending:
        return Pending(self.python, self.timeout, self.env, self.prefix)

    def read(self, pending: Pending | None = None) -> CardsReading:
        """A reading (``pending``'s, when one was started), with each card's utilization."""
        reading = (pending or self.start()).result()
        for card in reading.cards:
            key = card["uuid"] or card["card"]
            card["util"] = utilization(card["counters"], self._counters.get(key), card["cores"])
            if card["counters"]:
                self._counters[key] = card["counters"]
        return reading

    def __call__(self) -> tuple[list[dict], str | None]:
        """(cards, why): the node agent's form (daemon/launchers/k8s/agent.py)."""
        reading = self.read()
        return [dict(c) for c in reading.cards], reading.why


# === health ==================================================================


def throttled(card: dict) -> list[str]:
    """The reasons a card is throttled that slow a run (any but Idle)."""
    return [r for r in card.get("throttle") or [] if r not in BENIGN_THROTTLE]


def reason_words(reason: str) -> str:
    """``ThermalSlowdown`` -> ``thermal slowdown``, ``HwPowerCap`` -> ``hw power cap``."""
    words, word = [], ""
    for ch in reason:
        if ch.isupper() and word and not word[-1].isupper():
            words.append(word)
            word = ""
        word += ch
    words.append(word)
    return " ".join(w.lower() for w in words if w)


def problems(card: dict, max_temp_c: float) -> list[str]:
    """Why a card must not be launched on: not alive, throttling for a thermal or
    hardware reason, or hotter than ``max_temp_c``. [] when none is known."""
    found = []
    if card.get("alive") is False:
        found.append("not alive")
    hardware = [r for r in card.get("throttle") or [] if r in HARDWARE_THROTTLE]
    if hardware:
        found.append("throttling: " + ", ".join(reason_words(r) for r in hardware))
    temp = card.get("temp_c")
    if isinstance(temp, (int, float)) and temp > max_temp_c:
        found.append(f"soc_peak {temp:.1f} °C > max_temp_c {max_temp_c:g}")
    return found


@dataclass(frozen=True)
class Health:
    """Every card's problems: the card-health gate's reading and words."""

    unhealthy: dict[str, list[str]] = field(default_factory=dict)
    checked: int = 0
    hottest: tuple[str, float] | None = None

    def detail(self, where: str = "") -> str:
        prefix = f"{where}: " if where else ""
        if self.unhealthy:
            return prefix + "; ".join(f"{card} {', '.join(why)}"
                                      for card, why in self.unhealthy.items())
        text = f"{prefix}{self.checked} card{'s' if self.checked != 1 else ''} healthy"
        if self.hottest:
            text += f" (hottest {self.hottest[0]} {self.hottest[1]:.1f} °C)"
        return text


def health(cards, max_temp_c: float, skip=frozenset()) -> Health:
    """The problems of ``cards`` less those in ``skip`` (cards a pod already holds: the
    device plugin cannot give them to our run)."""
    unhealthy, checked, hottest = {}, 0, None
    for card in cards:
        name = card.get("card") or "?"
        if name in skip:
            continue
        checked += 1
        found = problems(card, max_temp_c)
        if found:
            unhealthy[name] = found
        temp = card.get("temp_c")
        if isinstance(temp, (int, float)) and (hottest is None or temp > hottest[1]):
            hottest = (name, float(temp))
    return Health(unhealthy, checked, hottest)
