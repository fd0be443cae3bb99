"""What a run asks for: validation of submitted options into a run config.

The CLI's ``submit`` and the TUI's submit form both call ``validate``; the
launchers turn the config into the trainer's argv with ``trainer_argv``.
"""

from __future__ import annotations

import re
from pathlib import Path

from daemon.errors import BadInput
from trainer import datafile, datatable, modelconfig, records
from trainer.config import default_baseline_steps
from trainer.errors import UsageError
from trainer.ownership import unusable_output

#: Named model configs the trainer builds without a download, with their decoder
#: layers (trainer/modelconfig.py NAMED, which the trainer builds from).
MODEL_LAYERS = {name: kwargs["num_hidden_layers"]
                for name, (_, kwargs) in modelconfig.NAMED.items()}
KNOWN_MODELS = tuple(MODEL_LAYERS)

DEFAULTS = {
    "resident": 0,  # per card; 0: every layer offloaded, a placement every --cards can make
    "steps": 200,
    "baseline": False,
    "baseline_steps": None,
    "interleave": None,  # None: INTERLEAVE_BLOCK on cpu, 0 on cards (see interleave_default)
    "model": "tiny-llama",
    "data": "synthetic",
    "pack": False,  # several examples a row (the trainer's --pack)
    "seq_len": 512,
    "accum": 4,
    "lr": 1e-5,
    "seed": 0,
    "backend": "cpu",
    "lora": None,
    "image": None,
    "deadline": None,
    "precompile": False,
    # The run's output (issue 26): the saved model, its checkpoints and held-out loss.
    "out": None,  # None: HOME/runs/<id>/model (local), or the output volume's (k8s)
    "checkpoint_every": None,  # None: checkpoints only when stopped (SIGTERM)
    "keep_checkpoints": 2,
    "merge": False,  # with --lora: write merged full weights instead of the adapter
    "eval_data": None,
    "eval_split": None,
    "eval_every": None,  # None: the held-out loss before the first step and after the last
    "max_data_bytes": None,  # None: the trainer's (trainer/datafile.py MAX_DATA_BYTES)
}

#: The folder under a run's folder where its model and checkpoints go by default.
MODEL_DIR = "model"

#: Steps per block when the baseline and the asked config alternate (``--interleave``).
#: Short blocks, because host noise comes in bursts several steps long: a burst
#: that fills one pass's block of 5 moves that pass's median alone, one that
#: spans blocks of 2 lands on both passes. Not 1: the step after a switch runs
#: a few percent slow, and in blocks of 1 the pairs do not cancel it
#: (experiments/2026-12-01-stepmodel-timing-the-two-passes.md has the measurements).
INTERLEAVE_BLOCK = 2

_BACKEND = re.compile(r"^(cpu|cuda(:\d+)?|furiosa:(auto|\d+))$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
#: A Kubernetes node name (a DNS-1123 subdomain).
_NODE = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


#: The largest integer option: a count past it is a typo, and every count must fit
#: the store's and the trainer's 64-bit integers with room to add to it.
MOST = 2 ** 31 - 1


def _at_least(options: dict, key: str, low: float) -> None:
    value = options[key]
    if value is None or value < low:
        raise BadInput(f"--{key.replace('_', '-')} must be >= {low:g}, got {value}")
    if isinstance(value, int) and value > MOST:
        raise BadInput(f"--{key.replace('_', '-')} must be <= {MOST}, got {value}")


def _check_model(model: str) -> tuple[str, modelconfig.Architecture]:
    """The model as the trainer will be given it, and its architecture (its config.json
    read bounded and checked: the trainer's own reading, trainer/modelconfig.py)."""
    if model in KNOWN_MODELS:
        return model, modelconfig.named(model)
    path = Path(model).expanduser()
    try:
        found = path.is_dir() and (path / modelconfig.CONFIG_NAME).exists()
    except OSError as exc:  # a folder above it that this user cannot search
        raise BadInput(f"--model {model!r}: {exc.strerror}") from None
    if not found:
        raise BadInput(f"--model {model!r} is neither a known model "
                       f"({', '.join(KNOWN_MODELS)}) nor a folder with a config.json")
    try:
        return str(path.resolve()), modelconfig.read(path)
    except UsageError as exc:
        raise BadInput(str(exc)) from None


def _check_data(data: str, option: str = "--data", max_bytes: int | None = None) -> str:
    """The data as the trainer will be given it; a file or a table is read through as the
    trainer reads it (trainer/datafile.py: its size, its lines, UTF-8; trainer/datatable.py:
    a Parquet file or a datasets folder) and refused in its words."""
    try:
        kind, path = datafile.named(data)
    except UsageError:
        raise BadInput(f"{option} {data!r}: use {datafile.SPEC_FORMS}") from None
    if path is None:
        return data
    max_bytes = max_bytes or datafile.MAX_DATA_BYTES
    try:
        if kind == datatable.DATASETS:
            if not path.is_dir():
                raise BadInput(f"{option} {data!r}: no folder at {path}")
            datatable.check(path, max_bytes=max_bytes, option=option, kind=kind)
        elif not path.is_file():
            raise BadInput(f"{option} {data!r}: no file at {path}")
        elif kind == datatable.PARQUET:
            datatable.check(path, max_bytes=max_bytes, option=option, kind=kind)
        else:
            datafile.check(path, max_bytes=max_bytes, option=option)
    except OSError as exc:  # a folder above it that this user cannot search
        raise BadInput(f"{option} {data!r}: {exc.strerror}") from None
    except UsageError as exc:
        raise BadInput(str(exc)) from None
    return f"{kind}:{path.resolve()}"


def _check_positions(config: dict, arch: modelconfig.Architecture) -> None:
    if config["seq_len"] > arch.positions:
        raise BadInput(f"--seq-len {config['seq_len']} is past the {arch.positions:,} positions "
                       f"of --model {config['model']} (its max_position_embeddings)")


def validate(options: dict, *, host=None) -> dict:
    """A complete run config from submitted options; raises BadInput on the first bad value.

    ``host`` (a daemon.run.host_fit.Host): also refuse what the launcher's host cannot run (its
    memory; the furiosa package on the local launcher).
    """
    config = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None}}
    if config.get("cards") is None:
        raise BadInput("--cards is required")
    _at_least(config, "cards", 1)
    _at_least(config, "resident", 0)
    _at_least(config, "steps", 1)
    _at_least(config, "seq_len", 8)
    _at_least(config, "accum", 1)
    _at_least(config, "seed", 0)
    if not (config["lr"] > 0 and config["lr"] < 1):
        raise BadInput(f"--lr must be in (0, 1), got {config['lr']}")
    if config["baseline_steps"] is not None:
        _at_least(config, "baseline_steps", 1)
    if config["lora"] is not None:
        _at_least(config, "lora", 1)
    if config["interleave"] is not None:
        _at_least(config, "interleave", 0)
    else:
        config["interleave"] = interleave_default(config["backend"])
    if config["deadline"] is not None:
        _at_least(config, "deadline", 1)
    _check_output(config)
    if not _BACKEND.match(config["backend"]):
        raise BadInput(f"--backend {config['backend']!r}: use cpu, cuda[:N], furiosa:auto "
                       f"or furiosa:N")
    if config.get("name") is not None and not _NAME.match(config["name"]):
        raise BadInput(f"--name {config['name']!r}: use letters, digits, '.', '_' or '-' "
                       f"(at most 63, starting with a letter or digit)")
    if config.get("name") is not None and config["name"].isdigit():
        # A run is referred to by id or name, and digits are read as an id (store/codec.py).
        raise BadInput(f"--name {config['name']!r}: a name of digits only reads as a run id; "
                       f"add a letter (run-{config['name']})")
    if config.get("node") is not None and not _NODE.match(config["node"]):
        raise BadInput(f"--node {config['node']!r}: not a Kubernetes node name (lower-case "
                       f"letters, digits, '-' and '.')")
    config["model"], arch = _check_model(config["model"])
    config["data"] = _check_data(config["data"], max_bytes=config["max_data_bytes"])
    # The one placement rule (refuse, never clamp), shared with `model` and the trainer.
    from daemon.stepmodel import check_placement

    check_placement(arch.layers, config["cards"], config["resident"])
    _check_positions(config, arch)
    if host is not None:
        from daemon.run import host_fit

        host_fit.check(config, arch, host)
    return config


def _check_output(config: dict) -> None:
    """The output options (issue 26): the trainer's own rules, refused here before queueing."""
    for key in ("checkpoint_every", "eval_every"):
        if config[key] is not None:
            _at_least(config, key, 1)
    _at_least(config, "keep_checkpoints", 1)
    if config["merge"] and not config["lora"]:
        raise BadInput("--merge needs --lora: a full fine-tune's output is already full weights")
    if config["eval_split"] is not None and not 0 < config["eval_split"] < 1:
        raise BadInput(f"--eval-split must be a fraction in (0, 1), got {config['eval_split']}")
    if config["eval_split"] is not None and config["eval_data"] is not None:
        raise BadInput("give --eval-data or --eval-split, not both")
    if config["max_data_bytes"] is not None:
        _at_least(config, "max_data_bytes", 1)
    if config["eval_data"] is not None:
        config["eval_data"] = _check_data(config["eval_data"], option="--eval-data",
                                          max_bytes=config["max_data_bytes"])
    if config["eval_every"] is not None and config["eval_data"] is None \
            and config["eval_split"] is None:
        raise BadInput("--eval-every needs --eval-data or --eval-split: there is nothing "
                       "to evaluate on")
    if config["out"] is not None:
        why = unusable_output(str(config["out"]))
        if why is not None:  # '' would be the shell's working folder; / and ~ are no run's
            raise BadInput(f"--out {config['out']!r}: {why}")
        out = Path(config["out"]).expanduser()
        try:
            if out.exists() and not out.is_dir():
                raise BadInput(f"--out {config['out']!r}: a file is there, not a folder")
            config["out"] = str(out.resolve())
        except OSError as exc:  # a folder above it that this user cannot search
            raise BadInput(f"--out {config['out']!r}: {exc.strerror}") from None


def output_dir(run: dict, runs_dir: Path) -> Path:
    """Where a run's model and checkpoints go: ``--out``, else ``<runs_dir>/<id>/model``."""
    out = run["config"].get("out")
    return Path(out) if out else Path(runs_dir) / str(run["id"]) / MODEL_DIR


def interleave_default(backend: str) -> int:
    """Interleave on cpu; on cards the two passes' models would share the card's memory.

    Interleaving keeps both passes' models alive at once. On the host that is
    a few hundred MB more; on a card it doubles what the passes hold there,
    which a config sized to the card would not survive.
    """
    return INTERLEAVE_BLOCK if backend == "cpu" else 0


def baseline_steps(config: dict) -> int:
    """The steps the run's baseline pass takes: ``--baseline-steps``, else the trainer's
    default (trainer/config.py ``default_baseline_steps``, which says why).

    Worked out when the Job starts, not stored at submit, so a run edited to
    fewer steps (or to interleave) gets the default of what it now is.
    """
    if config.get("baseline_steps"):
        return int(config["baseline_steps"])
    return default_baseline_steps(int(config["steps"]), int(config.get("interleave") or 0))


def trainer_argv(run: dict, *, log_path: str | None, python: str | None,
                 cache_dir: str | None = None, command: str = "train",
                 out_dir: str | None = None, on_checkpoint_error: str | None = None,
                 home_id: str | None = None, output_mode: str | None = None) -> list[str]:
    """The trainer's command line for a run, as a list (never a shell string).

    ``out_dir``: where the trainer writes the model and its checkpoints, as the
    trainer sees it (a launcher's choice: ``output_dir``, or a volume's path).
    ``home_id`` (``Store.home_id``) with the run id names who owns that folder;
    ``output_mode`` (``[daemon] output_mode``) is its mode.
    """
    c = run["config"]
    backends = ",".join([c["backend"]] * int(c["cards"]))
    argv = [python or "python", "-m", "trainer", command]
    if command != "train":
        return argv + ["--model", c["model"], "--backend", backends, "--seq-len",
                       str(c["seq_len"])]
    argv += [
        "--run-id", str(run["id"]),
        *(["--home-id", home_id] if home_id else []),
        "--model", c["model"],
        *(["--lora", str(c["lora"])] if c.get("lora") else ["--full"]),
        "--resident-layers", str(c["resident"]),
        "--backend", backends,
        "--steps", str(c["steps"]),
        "--seq-len", str(c["seq_len"]),
        "--accum", str(c["accum"]),
        "--lr", repr(float(c["lr"])),
        "--data", c["data"],
        "--seed", str(c["seed"]),
    ]
    if c.get("pack"):
        argv += ["--pack"]
    if c.get("baseline"):
        argv += ["--baseline", "--baseline-steps", str(baseline_steps(c))]
        if c.get("interleave"):
            argv += ["--interleave", str(c["interleave"])]
    if c.get("lora") and c.get("merge"):
        argv += ["--merge"]
    if out_dir:
        argv += ["--out", str(out_dir), "--keep-checkpoints", str(c.get("keep_checkpoints") or 2)]
        if c.get("checkpoint_every"):
            argv += ["--checkpoint-every", str(c["checkpoint_every"])]
        if on_checkpoint_error:
            argv += ["--on-checkpoint-error", on_checkpoint_error]
        if output_mode:
            argv += ["--output-mode", output_mode]
    if c.get("eval_data"):
        argv += ["--eval-data", c["eval_data"]]
    if c.get("eval_split"):
        argv += ["--eval-split", repr(float(c["eval_split"]))]
    if c.get("eval_every"):
        argv += ["--eval-every", str(c["eval_every"])]
    if c.get("max_data_bytes"):
        argv += ["--max-data-bytes", str(c["max_data_bytes"])]
    if log_path:
        argv += ["--log", str(log_path)]
    if cache_dir:
        argv += ["--cache-dir", str(cache_dir)]
    return argv


# === --set key=value (edit, clone) ===========================================

#: The type of every config key a user may set, as submit's options have them.
SETTABLE = {
    "cards": int, "resident": int, "steps": int, "baseline": bool, "baseline_steps": int,
    "model": str, "data": str, "pack": bool, "seq_len": int, "accum": int, "lr": float, "seed": int,
    "lora": int, "backend": str, "image": str, "deadline": int, "precompile": bool, "name": str,
    "interleave": int, "node": str, "out": str, "checkpoint_every": int,
    "keep_checkpoints": int, "merge": bool, "eval_data": str, "eval_split": float,
    "eval_every": int, "max_data_bytes": int,
}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_setting(text: str) -> tuple[str, object]:
    """``key=value`` as submit's option would take it; ``key=`` resets an optional key.

    Keys take dashes or underscores (``seq-len=128``). Raises BadInput with one line.
    """
    key, sep, raw = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise BadInput(f"--set {text!r}: use key=value")
    kind = SETTABLE.get(key)
    if kind is None:
        raise BadInput(f"--set {key}: not a setting; use one of "
                       f"{', '.join(k.replace('_', '-') for k in SETTABLE)}")
    raw = raw.strip()
    if raw == "":
        if key in DEFAULTS:
            return key, DEFAULTS[key]
        if key in ("name", "node"):  # optional, with no default: unset
            return key, None
        raise BadInput(f"--set {key}=: {key.replace('_', '-')} has no default to reset to")
    if kind is bool:
        if raw.lower() not in _TRUE + _FALSE:
            raise BadInput(f"--set {key}={raw}: use true or false")
        return key, raw.lower() in _TRUE
    try:
        return key, kind(raw)
    except ValueError:
        raise BadInput(f"--set {key}={raw}: not a valid "
                       f"{'integer' if kind is int else 'number'}") from None


def merged_config(run: dict, passes: list[dict]) -> dict:
    """The run's config as it ran: the submitted one, overlaid with the main pass's start
    record (what the trainer said it ran); ``passes`` as ``Store.passes`` gives them."""
    config = dict(run.get("config") or {})
    for p in passes:
        if p["config_label"] == records.MAIN:
            config.update(p.get("config") or {})
    return config


def config_diff(a: dict, b: dict) -> dict:
    """The config keys whose values differ: {key: (a's, b's)}, in a's key order then b's."""
    keys = list(dict.fromkeys([*a, *b]))
    return {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}


def apply_settings(config: dict, settings: list[str], *, host=None) -> dict:
    """A queued or finished run's config with ``key=value`` changes, validated as submit does
    (``host``: as ``validate``'s)."""
    changes = dict(parse_setting(s) for s in settings)
    options = {**config, **changes}
    for key, value in changes.items():
        if value is None:  # reset: validate() fills defaults only for keys it is not given
            options.pop(key, None)
    return validate(options, host=host)
