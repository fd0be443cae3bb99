"""The trainer's argv for a run; it lives with the run's spec in ``daemon.runspec``."""

from daemon.runspec import trainer_argv

__all__ = ["trainer_argv"]
