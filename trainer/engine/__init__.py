"""The engine: one optimizer step of a causal LM, layer by layer across cards and the host
(layer_engine.py), its AdamW and schedule (optim.py), the plain whole-model loop it must match
(plain.py), the optimizer's cost per layer (calibrate.py), and how the two timed passes share
the host (timing.py)."""
