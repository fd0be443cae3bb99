"""The daemon side of rngdctl: one package per part, ``home``, ``errors`` and ``faults`` beside.

- ``store/``: the SQLite store, the only package with SQL, and its compaction;
- ``probes/``: what the host and its cards read now: load, device holders joined to
  their pods (cgroups), furiosa-smi's card readings and their sampling;
- ``gates/``: the verdicts, without I/O: may the head of the queue start, on which node;
- ``run/``: one run: its config (``spec``), its lines into the store (``ingest``), its
  plots, its output, and two runs compared (``diff``);
- ``scheduling/``: the loop (``loop.Daemon.tick``), the queue, estimates, the plan,
  notifications, and whether a daemon (and which replica) is running;
- ``launchers/``: local and Kubernetes launchers and the retry rule; ``launchers/k8s/``
  holds every line of Kubernetes code (the client, leader election, doctor, the agent);
- ``stats/``, ``stepmodel/``: a run's statistics and the step model that reads them.

Nothing in this package imports torch, transformers or textual; the Kubernetes client
is imported only by ``launchers/k8s/client.py``. The layers and the absence of import
cycles are checked by tests/spine/test_import_rules.py.
"""
