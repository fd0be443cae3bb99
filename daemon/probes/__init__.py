"""What the host and its cards read now, as plain data, so that a reading taken on another
node (``rngdctl agent``) stands in for a local one.

- ``host_reading``: the load average and the processes that hold RNGD device files;
- ``cgroups``: which Kubernetes pod a process belongs to;
- ``holders``: each device holder joined to its pod, Job and run; orphans and phantoms;
- ``smi``: furiosa-smi's card readings, in a child process with a timeout;
- ``card_sampler``: the daemon's card readings every ``card_sample_s``, stored with the run
  that holds each card.
"""
