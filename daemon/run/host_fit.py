"""Whether the host a run launches on can run it: submit's checks that depend on the launcher.

``validate`` (daemon/run/spec.py) refuses what no host could run. Given a ``Host`` (what
the home's launcher gives a trainer) it also refuses, in one line, what that host cannot:

- a model larger than its memory, by the step model's figures (trainer/footprint.py, which
  the step model and the trainer's own start check share);
- on the local launcher, a furiosa backend whose package is not installed for the python
  that runs the trainer. The local launcher runs ``python -m trainer`` with its own
  interpreter (``sys.executable``, daemon/launchers/local.py), so that is the python
  looked in; the k8s launcher's image brings the package.

Where a figure is not known here (a pod without ``[k8s] memory``), nothing is refused: the
trainer checks its own host at its start, before it allocates anything.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from daemon.errors import BadInput
from trainer import footprint
from trainer.modelconfig import Architecture

#: The import furiosa-torch provides (trainer/backends/furiosa_torch.py imports it).
FURIOSA_MODULE = ("furiosa", "torch")


@dataclass(frozen=True)
class Host:
    """What the home's launcher gives a run's trainer, as far as submit can tell."""

    launcher: str  # local | k8s
    memory_bytes: int | None  # None: not known here
    python: str | None  # the local launcher's trainer python; None: the Job's image

    @classmethod
    def of(cls, config) -> Host:
        """The host of the home's ``[daemon] launcher`` (a daemon.home.Config)."""
        if config.daemon.launcher == "k8s":
            from daemon.scheduling.plan import memory_quantity_gb

            gb = memory_quantity_gb(config.k8s.memory)
            return cls("k8s", None if gb is None else int(gb * 1e9), None)
        return cls("local", footprint.host_memory_bytes(), sys.executable)


def check(config: dict, arch: Architecture, host: Host) -> None:
    """Refuse, as BadInput in one line, a validated run config ``host`` cannot run."""
    _check_memory(config, arch, host)
    _check_furiosa(config["backend"], host)


def _check_memory(config: dict, arch: Architecture, host: Host) -> None:
    if host.memory_bytes is None:
        return
    backend = ",".join([config["backend"]] * int(config["cards"]))
    need = footprint.run_host_bytes(
        arch, cards=int(config["cards"]), resident_per_card=int(config["resident"]),
        backend=backend, baseline=bool(config["baseline"]),
        interleave=int(config["interleave"] or 0))
    where = "the pod's [k8s] memory" if host.launcher == "k8s" else "this host"
    problem = footprint.too_large(need, host.memory_bytes, f"--model {config['model']}", where)
    if problem:
        raise BadInput(problem)


def _check_furiosa(backend: str, host: Host) -> None:
    if host.python is None or not backend.startswith("furiosa"):
        return
    if not furiosa_torch_installed():
        raise BadInput(f"--backend {backend}: furiosa-torch is not installed for {host.python}, "
                       "the python the local launcher runs the trainer with: run rngdctl from "
                       "an environment that has it (pip install '.[furiosa]'), or use the k8s "
                       "launcher ([daemon] launcher = \"k8s\" in config.toml)")


def furiosa_torch_installed() -> bool:
    """Whether ``furiosa.torch`` can be imported here, found without importing it (nor torch:
    ``furiosa`` is a namespace package, looked up by its path alone)."""
    import importlib.machinery
    import importlib.util

    parent, child = FURIOSA_MODULE
    try:
        spec = importlib.util.find_spec(parent)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    found = importlib.machinery.PathFinder.find_spec(f"{parent}.{child}",
                                                     list(spec.submodule_search_locations))
    return found is not None
