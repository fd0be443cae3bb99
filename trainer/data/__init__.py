"""The data: the run's examples read from their source (NSMC, JSONL or synthetic), encoded
and cut into fixed-shape micro-batches (batches.py), and the tokenizer that encodes them: the
model folder's own, or one trained offline on the data (tokenizer.py). The bounded reading of
a data file is trainer/datafile.py, a shared module: the daemon reads it too."""
