"""The home folder: where a user's rngdctl state lives, and its config.toml.

``--home DIR``, else ``RNGDCTL_HOME``, else the platform's user data folder.
It holds ``rngdctl.db``, ``config.toml``, ``daemon.lock`` and ``runs/<id>/``.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from daemon.errors import ConfigError, NotPrivate

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
    # a run's output folder's mode (its files: the same less execute); "0750" shares the
    # saved models with the group (trainer/ownership.py parse_mode)
    output_mode: str = "0700"


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
class TrackersConfig:
    # where the daemon sends every run (daemon/trackers/); unset: nowhere
    tensorboard: str | None = None  # a folder: each run's event files in DIR/run-<id>[-<name>]
    mlflow: str | None = None  # an MLflow tracking server, http://host:port
    mlflow_experiment: str = "rngdctl"  # the MLflow experiment the runs go in
    timeout: float = 10.0  # seconds for one request to a tracker; then it is retried later


@dataclass
class Config:
    gates: GateConfig = field(default_factory=GateConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    k8s: K8sConfig = field(default_factory=K8sConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    trackers: TrackersConfig = field(default_factory=TrackersConfig)


_SECTIONS = {"gates": GateConfig, "daemon": DaemonConfig, "k8s": K8sConfig,
             "notify": NotifyConfig, "trackers": TrackersConfig}


def _check_type(where: str, section: str, name: str, value, default):
    expected = type(default) if default is not None else None
    if expected is None or value is None:
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
        raise ConfigError(
            f"{where}: [{section}] {name} must be {expected.__name__}, got {value!r}"
        )
    return value


def parse_config(text: str, where: str = "config.toml") -> Config:
    """A config from config.toml's text; ConfigError, one line starting with ``where`` (the
    file's path), for a key, a type or a value out of its range."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    config = Config()
    for section, values in raw.items():
        if section not in _SECTIONS:
            raise ConfigError(f"{where}: unknown section [{section}]")
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: [{section}] must be a table")
        target = getattr(config, section)
        known = {f.name for f in fields(target)}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(f"{where}: unknown key {name!r} in [{section}]")
            setattr(target, name, _check_type(where, section, name, value,
                                              getattr(target, name)))
    _check_ranges(config, where)
    daemon = config.daemon
    if daemon.cancel_grace is not None and "stop_grace_s" not in raw.get("daemon", {}):
        daemon.stop_grace_s = float(daemon.cancel_grace)
    _check_words(config, where)
    _check_output_mode(config.daemon.output_mode, where)
    _check_notify(config.notify, where)
    _check_trackers(config.trackers, where)
    return config


def _check_output_mode(text: str, where: str) -> None:
    from trainer.ownership import parse_mode

    try:
        parse_mode(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: [daemon] output_mode {exc}") from None


#: Each number's range, (lowest, whether the lowest is allowed); every number must also be
#: finite (TOML has inf and nan) and an integer at most MOST. None is allowed only where
#: the key's default is None. Checked by every command that reads the config.
POSITIVE, NOT_NEGATIVE, ONE_OR_MORE = (0, False), (0, True), (1, True)
RANGES = {
    "gates": {"load_max": POSITIVE, "consecutive": ONE_OR_MORE, "phantom_after": NOT_NEGATIVE,
              "max_temp_c": POSITIVE},
    "daemon": {"tick": POSITIVE, "stop_grace_s": POSITIVE, "cancel_grace": POSITIVE,
               "sample_every": POSITIVE, "full_resolution_days": NOT_NEGATIVE,
               "compact_every": POSITIVE, "follow_failures": ONE_OR_MORE,
               "max_attempts": ONE_OR_MORE, "card_sample_s": POSITIVE},
    "k8s": {"ttl_seconds": POSITIVE, "default_deadline": POSITIVE, "max_attempts": ONE_OR_MORE,
            "request_timeout": POSITIVE, "retries": NOT_NEGATIVE,
            "retry_backoff": NOT_NEGATIVE, "prepull_timeout": POSITIVE,
            "prepull_retry": NOT_NEGATIVE, "runs_per_node": ONE_OR_MORE,
            "lease_duration": POSITIVE, "renew_deadline": POSITIVE},
    "notify": {"timeout": POSITIVE, "blocked_minutes": NOT_NEGATIVE},
    "trackers": {"timeout": POSITIVE},
}
#: The largest integer setting: Kubernetes takes its seconds as 32-bit integers.
MOST = 2 ** 31 - 1
#: The words a key may take.
CHOICES = {
    ("daemon", "launcher"): ("local", "k8s"),
    ("daemon", "checkpoint_failure"): ("continue", "stop"),
    ("k8s", "pull_policy"): ("Always", "IfNotPresent", "Never"),
    ("k8s", "seccomp_profile"): ("Unconfined", "RuntimeDefault", ""),
}


def _check_ranges(config: Config, where: str) -> None:
    for section, ranges in RANGES.items():
        values = getattr(config, section)
        for name, (low, included) in ranges.items():
            value = getattr(values, name)
            if value is None and _default(section, name) is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{where}: [{section}] {name} must be a number, "
                                  f"got {value!r}")
            whole = isinstance(_default(section, name), int) or name == "max_attempts"
            if whole and not isinstance(value, int):
                raise ConfigError(f"{where}: [{section}] {name} must be an integer, "
                                  f"got {value!r}")
            bound = f">= {low:g}" if included else f"> {low:g}"
            inside = value >= low if included else value > low
            if not inside or not math.isfinite(value) or (whole and value > MOST):
                raise ConfigError(f"{where}: [{section}] {name} must be {bound}"
                                  + (f" and at most {MOST}" if whole else " and finite")
                                  + f", got {value!r}")
    k8s = config.k8s
    if not k8s.renew_deadline < k8s.lease_duration:
        raise ConfigError(f"{where}: [k8s] renew_deadline ({k8s.renew_deadline}) must be "
                          f"above 0 and below lease_duration ({k8s.lease_duration})")


def _default(section: str, name: str):
    return getattr(_SECTIONS[section](), name)


def _check_words(config: Config, where: str) -> None:
    for (section, name), choices in CHOICES.items():
        value = getattr(getattr(config, section), name)
        if value not in choices:
            words = [c or '""' for c in choices]
            raise ConfigError(f"{where}: [{section}] {name} must be "
                              f"{', '.join(words[:-1])} or {words[-1]}, got {value!r}")
    gates, k8s = config.gates, config.k8s
    if not all(isinstance(g, str) and g for g in gates.device_globs):
        raise ConfigError(f"{where}: [gates] device_globs must be a list of paths, "
                          f"got {gates.device_globs!r}")
    if not str(k8s.output_path).startswith("/"):
        raise ConfigError(f"{where}: [k8s] output_path must be an absolute path, "
                          f"got {k8s.output_path!r}")
    if not all(isinstance(v, (str, int, float)) for v in k8s.env.values()):
        raise ConfigError(f'{where}: [k8s] env must be a table of NAME = "value", '
                          f"got {k8s.env!r}")
    if k8s.volumes:  # its reader, only when there are some (the Kubernetes launcher's)
        from daemon.launchers.k8s.jobspec import volumes

        volumes(k8s, where=f"{where}: [k8s]")


def _check_notify(notify: NotifyConfig, where: str) -> None:
    if notify == NotifyConfig():
        return  # the defaults are valid: spare every command the notifier's module (18 ms)
    from daemon.errors import BadInput
    from daemon.scheduling.notify import MOMENTS, parse_command

    try:
        parse_command(notify.command, where=f"{where}: [notify] command")
    except BadInput as exc:
        raise ConfigError(str(exc)) from None
    unknown = [m for m in notify.on if m not in MOMENTS]
    if unknown or not all(isinstance(m, str) for m in notify.on):
        raise ConfigError(f"{where}: [notify] on takes {', '.join(MOMENTS)}; "
                          f"got {notify.on!r}")


def _check_trackers(trackers: TrackersConfig, where: str) -> None:
    if trackers == TrackersConfig():
        return  # none set: spare every command the trackers' modules
    from daemon.errors import BadInput
    from daemon.trackers.targets import check_folder, check_mlflow

    try:
        if trackers.tensorboard is not None:
            check_folder(trackers.tensorboard, where=f"{where}: [trackers] tensorboard")
        if trackers.mlflow is not None:
            check_mlflow(trackers.mlflow, where=f"{where}: [trackers] mlflow")
    except BadInput as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(trackers.mlflow_experiment, str) or not trackers.mlflow_experiment.strip():
        raise ConfigError(f"{where}: [trackers] mlflow_experiment must be a name, "
                          f"got {trackers.mlflow_experiment!r}")


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
output_mode = "0700"    # runs' output folders and saved models; "0750" shares them with the group

[notify]
# command = "notify-send rngdctl 'run {id} {name}: {status}'"  # no shell; see README
timeout = 10.0          # seconds a notifier may run before it is killed
blocked_minutes = 10.0  # "gates cleared" only after the head was blocked longer than this

[trackers]
# tensorboard = "~/tensorboard"     # every run's event files in DIR/run-<id>[-<name>]/
# mlflow = "http://127.0.0.1:5000"  # every run to this MLflow tracking server
mlflow_experiment = "rngdctl"  # the MLflow experiment the runs go in
timeout = 10.0          # seconds for one request to a tracker; a tracker down catches up later

[k8s]
namespace = "default"
image = "furiosa-llm:latest"
pull_policy = "IfNotPresent"
ttl_seconds = 3600
default_deadline = 7200
"""


# === the home folder =========================================================


#: A config.toml larger than this is not a config: it is not read.
MAX_CONFIG_BYTES = 1 << 20


def _private(path: Path, what: str, *, mode_too: bool = True) -> os.stat_result:
    """``ownership.check_private`` of ``path``, following a symbolic link that this user or
    root owns (a config kept with one's dotfiles) to the file it names; ``mode_too``
    False: its owner only."""
    from trainer.ownership import NotOurs, check_private

    try:
        if path.is_symlink() and os.lstat(path).st_uid in (os.geteuid(), 0):
            path = Path(os.path.realpath(path))
        if mode_too:
            return check_private(path, what)
        st = os.lstat(path)
        if st.st_uid != os.geteuid():
            check_private(path, what)  # raises, naming the owner
        return st
    except NotOurs as exc:
        raise NotPrivate(str(exc)) from None


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None


class Home:
    """Paths under one home folder, made 0700 on first use.

    The home is the user's: a home, config.toml or rngdctl.db that another user
    owns or may write is refused (``check``), since the daemon runs the config's
    notifier and trusts the store, and a home that others may read is refused
    too, as its logs and notes are the user's. See docs/design.md, "The threat model".
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_home()
        self._checked = False
        self._config: tuple[tuple, Config] | None = None  # (the file's stat, its config)

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
        path.mkdir(parents=True, exist_ok=True, mode=0o700)  # the home's privacy (issue 36)
        return path

    def ensure(self) -> Home:
        """Make the home (0700) and its config.toml on first use; else ``check`` it."""
        try:
            if not self._make():
                self.check()
            if not os.path.lexists(self.config_path):
                _write_new(self.config_path, DEFAULT_CONFIG_TEXT)
        except OSError as exc:
            raise ConfigError(f"cannot use home {self.path}: {exc.strerror}") from None
        return self

    def _make(self) -> bool:
        """Make the home folder, 0700 whatever the umask; False when it was there."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            return False
        os.chmod(self.path, 0o700)  # a umask may take bits away, never add them
        self._checked = True
        return True

    def check(self) -> None:
        """Refuse, in one line with the fix, a home that is not this user's alone.

        Another user's home, config.toml or rngdctl.db, or one that group or others
        may write, is refused: what is in it may have been planted. A home that
        others may only read is refused too, with the chmod that fixes it. A folder
        of this user's that is still empty (a ``mkdir``, a new volume) is not a home
        yet: rngdctl makes it 0700, as it makes a new one. Three lstat calls, once
        per process.
        """
        if self._checked or not os.path.lexists(self.path):
            return
        st = _private(self.path, "home", mode_too=False)
        if not stat.S_ISDIR(st.st_mode):
            raise NotPrivate(f"home {self.path} is not a folder")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077 and not self._made_private_if_empty():
            _private(self.path, "home")  # refused when group or others may write it
            raise NotPrivate(f"home {self.path} may be read by others (mode {mode:04o}): "
                             f"chmod 700 {self.path}")
        for path, what in ((self.config_path, "config file"), (self.db_path, "store")):
            if os.path.lexists(path):
                _private(path, what)
        self._checked = True

    def _made_private_if_empty(self) -> bool:
        """Make an empty folder 0700; whether it was empty, and still is once no one else
        can add to it (a file planted in between is found by the second look)."""
        if not _empty(self.path):
            return False
        os.chmod(self.path, 0o700)
        return _empty(self.path)

    def config(self) -> Config:
        """config.toml's config (the defaults without one), checked; read again only when
        the file changed. ConfigError naming the file's full path."""
        try:
            self.check()
        except OSError as exc:
            raise ConfigError(f"cannot use home {self.path}: {exc.strerror}") from None
        where = os.path.abspath(self.config_path)
        try:
            st = os.stat(self.config_path)
        except FileNotFoundError:
            return Config()
        except OSError as exc:
            raise ConfigError(f"cannot read {where}: {exc.strerror}") from None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._config is not None and self._config[0] == key:
            return self._config[1]
        from trainer.ownership import NotOurs, read_regular

        try:
            data = read_regular(self.config_path, max_bytes=MAX_CONFIG_BYTES,
                                what="config file")
        except NotOurs as exc:
            raise ConfigError(f"cannot read {where}: {exc}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{where}: not UTF-8 text") from None
        config = parse_config(text, where=where)
        self._config = (key, config)
        return config

    def store(self):
        """The home's store; the home and its config are checked first, so every command
        that opens it reports a foreign home or a broken config in one line."""
        from daemon.store import Store

        self.ensure()
        self.config()
        return Store(self.db_path)


def _write_new(path: Path, text: str) -> None:
    """A new file (0600) with ``text``; never through a link, never over a file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
