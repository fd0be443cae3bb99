"""rngdctl: queue, gate, launch, follow and write up fine-tuning runs on RNGD nodes."""

__version__ = "0.1.0"
