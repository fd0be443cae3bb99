"""Trackers: every run sent to TensorBoard and MLflow from what the store holds (issue 35).

- ``points``: what goes in (steps, evaluations, the config, the end), the same for both;
- ``send``: one run to one tracker from its cursors, a bounded batch at a time;
- ``tfevents``: TensorBoard's event file format, written without TensorBoard;
- ``tensorboard``, ``mlflow``: the two trackers;
- ``worker``: the daemon's thread that sends, off the tick;
- ``targets``: ``[trackers]`` and ``export --tensorboard/--mlflow`` checked, trackers made.

The cursors live in the store (daemon/store/trackers.py), so a restart, a tracker that was
down or one set later goes on where it stood. Loaded only where a tracker is asked for.
"""
