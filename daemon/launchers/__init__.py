"""Launchers start a run's trainer somewhere and follow it to its end.

``local`` runs it as a child process of this host; ``k8s`` as a Kubernetes
Job. Both feed the trainer's output lines to the same ``Ingest``. ``base`` is
what the scheduler needs from one, ``factory`` builds the one a config names,
``retry`` says which failures are transient. ``k8s/`` holds all of rngdctl's
Kubernetes code.
"""
