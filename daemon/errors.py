"""Domain errors. The CLI turns each into one line and exit code 2 (bad input), 3 (no
daemon to wait for) or 1."""


class RngdctlError(Exception):
    """Base of every error a user should see as one line."""

    exit_code = 1


class BadInput(RngdctlError):
    """The user asked for something invalid."""

    exit_code = 2


class NoSuchRun(BadInput):
    """No run has that id or name."""


class StoreError(RngdctlError):
    """The database cannot be opened or read (not a database, locked too long, disk full)."""


class StoreVersionError(StoreError):
    """The database was written by a newer rngdctl than this one."""


class ConfigError(BadInput):
    """config.toml cannot be read or holds a bad value."""


class NotPrivate(BadInput):
    """A home, config.toml or store that is not this user's alone: rngdctl will not use it."""


class NoDaemon(RngdctlError):
    """No daemon runs on this home, so what the command waits for cannot happen."""

    exit_code = 3


class DaemonAlreadyRunning(RngdctlError):
    """Another daemon holds this home's lock."""


class LaunchError(RngdctlError):
    """A launcher could not start a run."""


class ModelFitError(RngdctlError):
    """The step-time model cannot be fitted from the given baseline."""


class TrackerError(RngdctlError):
    """A tracker (TensorBoard, MLflow) could not take a run: unreachable, or it refused it."""
