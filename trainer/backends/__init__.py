"""The backends: where a card's layers run. The interface, its kinds and ``--backend``
(kinds.py); furiosa-torch as the trainer meets it (furiosa_torch.py) and the step's modules
for an RNGD card (furiosa_modules.py); the op report (op_report.py, over card_step.py's
graphs, each compile in a child with a time limit: limits.py); and the two commands that
try a backend without training: ``trainer check`` (check.py) and ``trainer compile``
(compile.py)."""
