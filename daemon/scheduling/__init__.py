"""What runs next, and when: the daemon loop and the queue it serves.

- ``loop``: the daemon loop (``Daemon.tick``): probes, gates, launch, follow, ingest;
- ``queueing``: dependencies, priorities, edits, clones and waits;
- ``estimate``: when a queued run will start and end;
- ``plan``: which (cards, resident) config to ask for;
- ``baselines``: which stored run prices a model (for the plan and the estimates);
- ``notify``: a command run when a run starts, ends or is unblocked;
- ``liveness``: is a daemon running on this home, and if not, since when;
- ``replicas``: which daemon replica leads.
"""
