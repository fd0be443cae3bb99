"""The output: what a run writes. Its output folder as the recipe uses it (folder.py): the
checkpoints (checkpoint.py, their manifest's form: manifest.py) and the saved model
(save.py), both written one tensor at a time through weights.py, with what made the run
(provenance.py); its records in ``--log FILE`` (steplog.py); and a person's lines on stderr
(console.py)."""
