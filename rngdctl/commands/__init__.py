"""One module per command family; each exposes click commands that cli.py registers."""
