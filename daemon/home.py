"""The home folder: where a user's rngdctl state lives, and its config.toml.

``--home DIR``, else ``RNGDCTL_HOME``, else the platform's user data folder.
It holds ``rngdctl.db``, ``config.toml``, ``daemon.lock`` and ``runs/<id>/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from daemon.errors import ConfigError

DB_NAME = "rngdctl.db"
CONFIG_NAME = "config.toml"
LOCK_NAME = "daemon.lock"


def default_home() -> Path:
    env = os.environ.get("RNGDCTL_HOME")
    if env:
        return Path(env)
    import platformdirs  # a dependency of textual; only needed here

    return Path(platformdirs.user_data_dir("rngdctl", appauthor=False))


# === config.toml =============================================================


@dataclass
class GateConfig:
    load_max: float = 150.0  # the 1-minute load average must be below this
    consecutive: int = 1  # gates must pass on this many ticks in a row before a launch
    device_globs: list[str] = field(default_factory=lambda: ["/dev/rngd*", "/dev/rngd/*"])
    phantom_after: float = 600.0  # seconds a card pod may hold no device file: then a phantom
    max_temp_c: float = 90.0  # a card hotter than this (furiosa-smi's soc_peak) is not used


@dataclass
class DaemonConfig:
    launcher: str = "local"  # local | k8s
    tick: float = 5.0  # seconds between ticks
    # Seconds between SIGTERM (a cancel, a deadline) and SIGKILL: the trainer finishes its
    # step and writes a checkpoint in between. A Kubernetes Job's pod gets it as
    # terminationGracePeriodSeconds, so a drain allows the same.
    stop_grace_s: float = 120.0
    cancel_grace: float | None = None  # the older name of stop_grace_s
    checkpoint_failure: str = "continue"  # a checkpoint that cannot be written: continue | stop
    sample_every: float = 5.0  # seconds between host-load samples during a run
    full_resolution_days: float = 30.0  # samples and gate checks older than this are folded
    compact_every: float = 3600.0  # seconds between two compactions of the store
    follow_failures: int = 5  # a run whose follow fails this many ticks in a row is failed
    # tries of a run before a transient failure fails it (daemon/launchers/retry.py)
    max_attempts: int = 3
    # seconds between two furiosa-smi card readings (daemon/probes/card_sampler.py)
    card_sample_s: float = 10.0


@dataclass
class K8sConfig:
    context: str | None = None
    namespace: str = "default"
    node: str | None = None
    image: str = "furiosa-llm:latest"
    pull_policy: str = "IfNotPresent"
    service_account: str | None = None
    ttl_seconds: int = 3600
    default_deadline: int = 7200
    cpu: str | None = None
    memory: str | None = None
    max_attempts: int | None = None  # None: [daemon] max_attempts (this key is older)
    precompile: bool = False
    requeue_on_eviction: bool = True
    env: dict = field(default_factory=dict)
    volumes: list = field(default_factory=list)
    # --- appended by the Kubernetes launcher (see docs/design.md) ---
    request_timeout: float = 15.0  # seconds for one API request (read timeout; connect <= 5)
    retries: int = 4  # retries of a transient API failure (no answer, 429, 5xx)
    retry_backoff: float = 0.5  # first backoff in seconds; doubles, full jitter, capped at 8
    prepull_timeout: int = 900  # seconds a pre-pull pod may take before it counts as failed
    prepull_retry: float = 60.0  # seconds before a failed pre-pull is tried again
    cache_dir: str | None = None  # compile-cache path inside the container (--cache-dir)
    # --- the run's output (issue 26): a PVC mounted at output_path; a run's model and
    # checkpoints go to <output_path>/runs/<id>/model there (without it: no --out, nothing
    # kept, no resume) ---
    output_volume: str | None = None
    output_path: str = "/rngdctl"
    agents: bool = False  # read every node through its rngdctl agent (docs/design.md)
    runs_per_node: int = 1  # with agents: our runs at once on one node; nodes run in parallel
    # --- RNGD cards (see docs/design.md) ---
    card_resource: str | None = None  # None: the node's furiosa.ai/rngd, rngd-s or rngd-max
    seccomp_profile: str = "Unconfined"  # the Job pod's; the driver uses io_uring; "" unsets
    # --- replicas of the daemon (daemon/launchers/k8s/leader.py, docs/design.md) ---
    leader_election: bool = False  # replicas take a Lease: only its holder launches
    lease_name: str = "rngdctl-daemon"  # the Lease in [k8s] namespace
    lease_duration: float = 15.0  # seconds a standby waits on an unrenewed Lease to take it
    renew_deadline: float = 10.0  # seconds the leader may go unrenewed before it stops acting


@dataclass
class NotifyConfig:
    # the default notifier (daemon/scheduling/notify.py); no shell
    command: str | list | None = None
    timeout: float = 10.0  # seconds a notifier may run; then it is killed (notify_failed)
    blocked_minutes: float = 10.0  # "gates cleared" only after blocked longer than this
    on: list[str] = field(default_factory=lambda: ["start", "finish", "failure",
                                                   "gates_cleared"])


@dataclass
class Config:
    gates: GateConfig = field(default_factory=GateConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    k8s: K8sConfig = field(default_factory=K8sConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)


_SECTIONS = {"gates": GateConfig, "daemon": DaemonConfig, "k8s": K8sConfig,
             "notify": NotifyConfig}


def _check_type(section: str, name: str, value, default):
    expected = type(default) if default is not None else None
    if expected is None or value is None:
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
        raise ConfigError(
            f"config.toml: [{section}] {name} must be {expected.__name__}, got {value!r}"
        )
    return value


def parse_config(text: str) -> Config:
    import tomllib  # here: `submit` reads no config, and tomllib's import is 4 % of it

    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config.toml: {exc}") from None
    config = Config()
    for section, values in raw.items():
        if section not in _SECTIONS:
            raise ConfigError(f"config.toml: unknown section [{section}]")
        if not isinstance(values, dict):
            raise ConfigError(f"config.toml: [{section}] must be a table")
        target = getattr(config, section)
        known = {f.name for f in fields(target)}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(f"config.toml: unknown key {name!r} in [{section}]")
            setattr(target, name, _check_type(section, name, value, getattr(target, name)))
    daemon = config.daemon
    if daemon.cancel_grace is not None and "stop_grace_s" not in raw.get("daemon", {}):
        daemon.stop_grace_s = float(daemon.cancel_grace)
    if not daemon.stop_grace_s > 0:
        raise ConfigError(f"config.toml: [daemon] stop_grace_s must be > 0, got "
                          f"{daemon.stop_grace_s}")
    if daemon.checkpoint_failure not in ("continue", "stop"):
        raise ConfigError(f"config.toml: [daemon] checkpoint_failure must be continue or stop, "
                          f"got {daemon.checkpoint_failure!r}")
    if not config.daemon.full_resolution_days >= 0 or not config.daemon.compact_every > 0:
        raise ConfigError("config.toml: [daemon] full_resolution_days must be >= 0 and "
                          "compact_every > 0")
    if not config.daemon.card_sample_s > 0:
        raise ConfigError(f"config.toml: [daemon] card_sample_s must be > 0, "
                          f"got {config.daemon.card_sample_s}")
    if config.k8s.runs_per_node < 1:
        raise ConfigError(f"config.toml: [k8s] runs_per_node must be >= 1, "
                          f"got {config.k8s.runs_per_node}")
    k8s = config.k8s
    if not 0 < k8s.renew_deadline < k8s.lease_duration:
        raise ConfigError(f"config.toml: [k8s] renew_deadline ({k8s.renew_deadline}) must be "
                          f"above 0 and below lease_duration ({k8s.lease_duration})")
    if config.daemon.launcher not in ("local", "k8s"):
        raise ConfigError(f"config.toml: [daemon] launcher must be local or k8s, "
                          f"got {config.daemon.launcher!r}")
    for section, value in (("daemon", config.daemon.max_attempts),
                           ("k8s", config.k8s.max_attempts)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 1):
            raise ConfigError(f"config.toml: [{section}] max_attempts must be an integer >= 1, "
                              f"got {value!r}")
    _check_notify(config.notify)
    return config


def _check_notify(notify: NotifyConfig) -> None:
    if notify == NotifyConfig():
        return  # the defaults are valid: spare every command the notifier's module (18 ms)
    from daemon.errors import BadInput
    from daemon.scheduling.notify import MOMENTS, parse_command

    try:
        parse_command(notify.command, where="config.toml: [notify] command")
    except BadInput as exc:
        raise ConfigError(str(exc)) from None
    if not notify.timeout > 0 or not notify.blocked_minutes >= 0:
        raise ConfigError("config.toml: [notify] timeout must be > 0 and blocked_minutes >= 0")
    unknown = [m for m in notify.on if m not in MOMENTS]
    if unknown or not all(isinstance(m, str) for m in notify.on):
        raise ConfigError(f"config.toml: [notify] on takes {', '.join(MOMENTS)}; "
                          f"got {notify.on!r}")


DEFAULT_CONFIG_TEXT = """\
# rngdctl configuration. Every key is optional; these are the defaults.

[gates]
load_max = 150.0        # the 1-minute load average must be below this
consecutive = 1         # gates must pass on this many ticks in a row (k8s: at least 2)
phantom_after = 600.0   # seconds a pod with cards may hold no device file before it is a phantom
max_temp_c = 90.0       # a card hotter than this (furiosa-smi soc_peak, °C) is not launched on

[daemon]
launcher = "local"      # local | k8s
tick = 5.0              # seconds between ticks
stop_grace_s = 120.0    # seconds between SIGTERM and SIGKILL (cancel, deadline, drain)
checkpoint_failure = "continue"  # a checkpoint the disk refused: continue | stop the run
follow_failures = 5     # a run whose follow/ingest fails this many ticks in a row fails
max_attempts = 3        # tries of a run before a transient failure fails it (see docs)
full_resolution_days = 30.0  # older samples fold to one row a minute, gate checks to runs
compact_every = 3600.0  # seconds between two compactions (a bounded batch each)
card_sample_s = 10.0    # seconds between two card readings (furiosa-smi, where installed)

[notify]
# command = "notify-send rngdctl 'run {id} {name}: {status}'"  # no shell; see README
timeout = 10.0          # seconds a notifier may run before it is killed
blocked_minutes = 10.0  # "gates cleared" only after the head was blocked longer than this

[k8s]
namespace = "default"
image = "furiosa-llm:latest"
pull_policy = "IfNotPresent"
ttl_seconds = 3600
default_deadline = 7200
"""


# === the home folder =========================================================


class Home:
    """Paths under one home folder, created on first use."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_home()

    @property
    def db_path(self) -> Path:
        return self.path / DB_NAME

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_NAME

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_NAME

    @property
    def cache_dir(self) -> Path:
        return self.path / "cache"

    def run_dir(self, run_id: int) -> Path:
        path = self.path / "runs" / str(run_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def ensure(self) -> Home:
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self.config_path.exists():
                self.config_path.write_text(DEFAULT_CONFIG_TEXT)
        except OSError as exc:
            raise ConfigError(f"cannot use home {self.path}: {exc.strerror}") from None
        return self

    def config(self) -> Config:
        try:
            text = self.config_path.read_text()
        except FileNotFoundError:
            return Config()
        except OSError as exc:
            raise ConfigError(f"cannot read {self.config_path}: {exc.strerror}") from None
        return parse_config(text)

    def store(self):
        from daemon.store import Store

        self.ensure()
        return Store(self.db_path)
