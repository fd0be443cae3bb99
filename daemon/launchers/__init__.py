"""Launchers start a run's trainer somewhere and follow it to its end.

``local`` runs it as a child process of this host; ``k8s`` as a Kubernetes
Job. Both feed the trainer's output lines to the same ``Ingest``.
"""

from __future__ import annotations


def make_launcher(name: str, **kwargs):
    """The launcher called ``name``; the k8s one imports the Kubernetes client."""
    from daemon.errors import BadInput

    if name == "local":
        from daemon.launchers.local import LocalLauncher

        return LocalLauncher(**kwargs)
    if name == "k8s":
        from daemon.launchers.k8s import K8sLauncher

        return K8sLauncher(**kwargs)
    raise BadInput(f"unknown launcher {name!r}: use local or k8s")
