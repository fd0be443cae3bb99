"""The run's result: --out is a folder that transformers and PEFT load, holding exactly
the trained masters, written one tensor at a time."""

from __future__ import annotations

import io
import json

import pytest
import torch
from tolerances import gamma, tiny_path

from trainer import records
from trainer.config import TrainConfig
from trainer.output import save, weights
from trainer.records import Event, RecordWriter
from trainer.train import Recipe

IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 64, 1, 88, 23, 11, 2]])


def trained(out, **cfg):
    """(the recipe after a short run with --out, its records)."""
    sink = io.StringIO()
    base = {"model": "tiny-llama", "backend": "cpu,cpu", "resident_layers": 1, "steps": 3,
            "seq_len": 16, "accum": 1, "lr": 1e-2, "threads": 1, "out": str(out)}
    recipe = Recipe(TrainConfig(**{**base, **cfg}), RecordWriter(sink))
    recipe.setup()
    recipe.run()
    return recipe, [records.parse_line(line) for line in sink.getvalue().splitlines()]


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def assert_same_up_to_order(got: torch.Tensor, want: torch.Tensor) -> None:
    """The same weights summed in another order (the adapter's product apart, or folded
    in): each logit within gamma(forward path) of the largest's scale (tolerances.py)."""
    tol = gamma(tiny_path(tokens=0, seq_len=IDS.shape[1]))
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "llama-3.1-8b-mini"])
def test_transformers_loads_the_saved_model_with_the_trainers_own_logits(tmp_path, name):
    from transformers import AutoModelForCausalLM

    recipe, _ = trained(tmp_path, model=name)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert torch.equal(logits(loaded), logits(recipe.model))  # bit for bit, fp32 on cpu
    # Every weight is the master itself, whatever attention the loader picks by default.
    default = AutoModelForCausalLM.from_pretrained(tmp_path).state_dict()
    for key, master in recipe.model.state_dict().items():
        assert torch.equal(default[key.replace(".base.", ".")], master), key


def test_a_tied_head_is_written_once_and_tied_again_on_load(tmp_path):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    trained(tmp_path, model="tiny-qwen2")
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight


def test_the_info_file_names_the_run_and_each_weights_files_checksum(tmp_path):
    _, recs = trained(tmp_path, run_id="7", data="synthetic", seed=3)
    info = json.loads((tmp_path / save.INFO_NAME).read_text())
    assert (info["run_id"], info["step"], info["data"], info["seed"]) == ("7", 3, "synthetic", 3)
    assert info["files"] == {"model.safetensors":
                             weights.file_digest(tmp_path / "model.safetensors")}
    (saved,) = [r for r in recs if isinstance(r, Event) and r.event == records.SAVED]
    assert saved.data["files"] == info["files"] and saved.data["format"] == "full"
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["use_cache"] is True and (tmp_path / "generation_config.json").exists()


def test_a_model_past_the_shard_size_is_written_in_shards_with_an_index(tmp_path):
    from transformers import AutoModelForCausalLM

    recipe, _ = trained(tmp_path / "run")
    save.save(tmp_path / "sharded", recipe.model, info={}, owner=recipe.outdir.owner,
              max_shard_bytes=200_000)
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "sharded",
                                                  attn_implementation="eager")
    assert torch.equal(logits(loaded), logits(recipe.model))


def test_a_lora_run_saves_a_peft_adapter_that_peft_loads_onto_its_base(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    recipe, _ = trained(tmp_path, lora=4)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 8.0)
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base", attn_implementation="eager")
    model = PeftModel.from_pretrained(base, tmp_path)
    assert_same_up_to_order(logits(model), logits(recipe.model))


def test_merge_writes_full_weights_with_the_adapters_folded_in(tmp_path):
    from transformers import AutoModelForCausalLM

    recipe, _ = trained(tmp_path, lora=4, merge=True)
    assert not (tmp_path / "adapter_config.json").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert_same_up_to_order(logits(loaded), logits(recipe.model))


# === LoRA outputs hold what save_pretrained of the base architecture holds ============


def safetensors_keys(folder) -> set[str]:
    from safetensors import safe_open

    keys = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            keys |= set(f.keys())
    return keys


def pretrained_keys(folder, tmp_path) -> set[str]:
    """The tensors transformers' own save_pretrained writes for the architecture in
    ``folder``'s config.json."""
    from transformers import AutoConfig, AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    reference.save_pretrained(tmp_path / "reference")
    return safetensors_keys(tmp_path / "reference")


LORA_OUTPUTS = [("tiny-llama", {}, "."), ("tiny-llama", {"merge": True}, "."),
                ("tiny-llama", {}, "base"), ("tiny-qwen2", {"merge": True}, "."),
                ("tiny-qwen2", {}, "base")]
LORA_IDS = ["llama merged", "llama adapter's base", "qwen2 (tied) merged", "qwen2 base"]


@pytest.mark.parametrize("name, cfg, folder", LORA_OUTPUTS[1:], ids=LORA_IDS)
def test_lora_outputs_hold_the_tensors_save_pretrained_of_the_base_writes(
        tmp_path, name, cfg, folder):
    trained(tmp_path / "out", model=name, lora=4, **cfg)
    saved = tmp_path / "out" / folder
    assert safetensors_keys(saved) == pretrained_keys(saved, tmp_path)


@pytest.mark.parametrize("name, cfg, folder", LORA_OUTPUTS, ids=["llama full", *LORA_IDS])
def test_every_output_loads_with_no_unexpected_or_missing_key(tmp_path, name, cfg, folder):
    from transformers import AutoModelForCausalLM

    trained(tmp_path, model=name, **({"lora": 4, **cfg} if cfg or folder == "base" else {}))
    _, info = AutoModelForCausalLM.from_pretrained(tmp_path / folder, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}


def test_an_adapter_loads_onto_its_base_with_every_key_used(tmp_path):
    import warnings

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trained(tmp_path, lora=4)
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PeftModel.from_pretrained(base, tmp_path)
    assert [str(w.message) for w in caught if "keys" in str(w.message)] == []
    again = model.load_adapter(tmp_path, adapter_name="again")
    assert (again.missing_keys, again.unexpected_keys) == ([], [])
