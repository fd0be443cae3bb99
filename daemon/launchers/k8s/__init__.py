"""All of rngdctl's Kubernetes code: the launcher, its API client, and the node agent.

``client.py`` is the one module that imports the ``kubernetes`` client; this package
imports nothing, and the modules that turn objects into data and back (``jobspec``,
``cluster``, ``logs``) import no Kubernetes code, so the gates, the holder probe and
the light commands read them at no cost. The rest:

- ``state.py``: what the launcher knows between ticks, kept in the store;
- ``leader.py``: leader election between daemon replicas (one Lease);
- ``doctor.py``: ``rngdctl doctor``, the checks of the machine and the cluster;
- ``agent.py``: ``rngdctl agent``, one node's readings published in a ConfigMap.

The Kubernetes launcher: card Jobs gated on the node, followed to their end.
One class, ``K8sLauncher`` (``launcher.py``: the Launcher protocol and its
plumbing), built from one module per idea:

- ``jobs.py``: the Job's life: create (or adopt), find, delete, compile first;
- ``following.py``: one look a tick at every running run's Job and pod, then
  each run's new log lines, ingested;
- ``outcomes.py``: how an attempt ended: the failure classification (deadline,
  admission, eviction, OOM, exit code, image pull) and the retry verdicts;
- ``images.py``: the image on the node and the card-less pre-pull pods;
- ``foreign_holders.py``: device holders after a launch (a foreign one deletes the Job),
  from this host's /proc or, with agents, the agent of the pod's node;
- ``agent_readings.py``: every node at once from the node agents' readings.

Per tick (see docs/design.md, "Kubernetes launcher"):

- idle: ``cluster_reading`` reads the node and the pods bound to it (2 calls):
  cards free and the image hint. An image that is not on the node is pulled
  by a card-less pre-pull pod first, so the card Job never waits on a pull.
- running: the tick's ``look`` lists the followed runs' pods (and their Jobs
  only when a pod does not say what happens next): list calls whatever the
  number of runs; ``follow`` reads each started pod's new log lines (1 call a
  pod), ingests them, and ends the run from the pod's state.
- An image-pull error deletes the Job in the same tick (the cards come back
  at once) and marks the image missing; when ``daemon/launchers/retry.py``
  takes the failure as transient (the image was pulled before) the run is
  requeued and the next gate check pre-pulls it, else it fails now, saying why. A pre-pull
  pod that cannot pull (a pull error, a failed pod, or no pull within
  ``prepull_timeout``) is deleted and, by the same rule, tried again after
  ``prepull_retry``. Each Job launched and each failed pre-pull is one try of
  the run; after ``max_attempts`` tries the run fails with the first kubelet
  message, even while it is still queued.

The Job's name, the log cursor (``log_since``, ``log_offset``), node and
image digest live in the run's row, so a restarted daemon adopts the Job and
resumes the log where it stopped. Everything else the launcher knows between
ticks (an image missing, a pre-pull in progress, a compile's digest, ...)
lives in the store too, through ``state.py``: a daemon restarted at any
instant acts on what the old one knew.
"""
