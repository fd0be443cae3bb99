"""The launcher a name picks: ``local`` or ``k8s``, each imported only when picked."""

from __future__ import annotations


def make_launcher(name: str, **kwargs):
    """The launcher called ``name``; the k8s one imports the Kubernetes client."""
    from daemon.errors import BadInput

    if name == "local":
        from daemon.launchers.local import LocalLauncher

        return LocalLauncher(**kwargs)
    if name == "k8s":
        from daemon.launchers.k8s.launcher import K8sLauncher

        return K8sLauncher(**kwargs)
    raise BadInput(f"unknown launcher {name!r}: use local or k8s")
