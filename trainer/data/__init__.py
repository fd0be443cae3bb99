"""The data: the run's examples read from their source and made ready to train on.

prepare.py does it in order, for the recipe: the cache first (cache.py: the encoded rows,
keyed by the data's and the tokenizer's hashes), else the source read (batches.py: NSMC,
JSONL; trainer/datatable.py, shared: Parquet and datasets folders), each line or row
recognised (formats.py: messages, ShareGPT, Alpaca, prompt/response, text), the tokenizer
(tokenizer.py: the model folder's own, or one trained offline on the data), chats rendered
with the model's chat template and the loss put on the assistant's turns (chat.py), then
held out, and packed several to a row with ``--pack`` (packing.py). batches.py also cuts
the rows into fixed-shape micro-batches. The bounded reading of a data file is
trainer/datafile.py, a shared module: the daemon reads it too."""
