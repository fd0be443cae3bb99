"""Gates: may the head of the queue start now, and on which node? Verdicts, without I/O, from
the readings the probes and the launcher took.

- ``rules``: each gate's verdict (``pass``, ``fail``, ``n/a``) for the head of the queue;
- ``nodes``: every RNGD node at once from the node agents' readings, a verdict per node.
"""
