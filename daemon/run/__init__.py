"""One run: what it asks for, its lines into the store, and what it gave, as read back.

- ``spec``: submitted options validated into a run config, and the trainer's argv;
- ``ingest``: the trainer's output lines into the store, idempotently;
- ``plots``: a pass's loss and step-time plots, downsampled as it grows (the TUI's, kept at
  ingest and sealed with the run);
- ``output``: the run's model folder, checkpoints, resumes and held-out loss;
- ``diff``: two runs side by side (``rngdctl diff``).
"""
