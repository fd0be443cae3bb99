"""The daemon side of rngdctl: the store, probes, gates, launchers and the loop.

Nothing in this package imports torch, transformers or textual; the
Kubernetes client is imported only by the k8s launcher.
"""
