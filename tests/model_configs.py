"""Model config.json files for the tests of what submit and the trainer refuse (issue 36)."""

from __future__ import annotations

import json
from pathlib import Path

#: A config.json as save_pretrained writes one, of a tiny Llama (256 positions).
TINY = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
        "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 128, "max_position_embeddings": 256}
#: Llama-3.1-405B's sizes: within every cap of trainer/modelconfig.py, beyond every host.
LLAMA_405B = {**TINY, "num_hidden_layers": 126, "hidden_size": 16384,
              "intermediate_size": 53248, "num_attention_heads": 128, "num_key_value_heads": 8,
              "vocab_size": 128256, "max_position_embeddings": 131072}


def model_folder(parent: Path, config: dict | bytes, name: str = "model") -> Path:
    """A model folder holding ``config`` (a dict as JSON, bytes as they are) as config.json."""
    folder = Path(parent) / name
    folder.mkdir(exist_ok=True)
    raw = config if isinstance(config, bytes) else json.dumps(config).encode()
    (folder / "config.json").write_bytes(raw)
    return folder
