"""How long furiosa-torch takes to compile one plain ``mm`` for a card, per shape and compiler
setting: what the op report's ``mm`` compiles cost, and whether a public knob shortens them.

Each compile runs in a forked child (``trainer/backends/limits.py``) given ``--limit`` seconds, with
a fresh, empty compile cache of its own (so nothing is served from an earlier compile), for a whole
card (8 PEs fused), as the op report compiles: ``mm(x, w.t())``, the weight a transposed view, as
``MmLinear`` runs it. One line per compile: shape, setting, verdict, wall seconds, and the setting
as the compiler recorded it (its ``compile_params.yaml``). Run it with the furiosa environment's
python:

    PYTHONPATH=. nice -n 15 $(python3 deploy/furiosa/env.py path)/bin/python \\
        bench/furiosa_compile_knobs.py --shapes 32x64x64,32x256x256 --settings default,estimation
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time

import torch

from trainer.backends import furiosa_torch
from trainer.backends.limits import in_child

#: The settings tried, as CompilerConfig keyword arguments (furiosa.torch.config). "default"
#: is what the package compiles an eager op with; "estimation" sorts the candidate tactics by
#: the compiler's cost estimate instead of at random (what the package's own
#: ext/transformers.py compiles Llama with); "hierarchical" is the documented "reduces
#: compile time" switch.
SETTINGS = {
    "default": {},
    "estimation": {"tactic_sorting_policy": "ByEstimation"},
    "hierarchical": {"hierarchical_tactic_population": True},
    "no-beam": {"scheduler_beam_search": False},
    "shapes-16": {"max_num_unique_shapes": 16},
}


def config_of(name: str):
    from furiosa.torch import config

    kwargs = dict(SETTINGS[name])
    if "tactic_sorting_policy" in kwargs:
        kwargs["tactic_sorting_policy"] = getattr(config.TacticSortingPolicy,
                                                  kwargs["tactic_sorting_policy"])
    return config.CompilerConfig(**kwargs) if kwargs else None


def compile_mm(m: int, k: int, n: int, setting: str, cache_dir: str):
    """In the child: compile mm([m, k], [n, k].t()) with ``setting``, caching into
    ``cache_dir`` (fresh: nothing to reuse)."""
    from furiosa.torch import config
    from furiosa.torch._backend.op_compile_probe import probe_aten_op

    x, w = torch.zeros(m, k), torch.zeros(n, k)
    with config.context(compiler_config=config_of(setting), cache_dir=cache_dir):
        r = probe_aten_op(torch.ops.aten.mm.default, (x, w.t()), {}, probe_id=0, caller=None)
    return r.status.name, furiosa_torch.one_line(r.exception) if r.exception else ""


def recorded(cache_dir: str, keys: tuple[str, ...]) -> str:
    """The settings the compiler wrote into its cache entry, for ``keys``."""
    found = glob.glob(os.path.join(cache_dir, "*", "compile_params.yaml"))
    if not found:
        return "no cache entry"
    with open(found[0]) as f:
        text = f.read()
    return ", ".join(line.strip() for line in text.splitlines()
                     if line.strip().split(":")[0] in keys)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="32x64x64",
                   help="comma list of MxKxN: mm of [M, K] by [K, N] (default %(default)s)")
    p.add_argument("--settings", default="default", help=f"comma list of {sorted(SETTINGS)}")
    p.add_argument("--limit", type=float, default=600.0, help="seconds per compile")
    args = p.parse_args(argv)
    furiosa_torch.fuse_cards()  # a whole card, as the op report and the trainer compile
    torch.set_num_threads(1)  # the compiles are forked
    keys = ("tactic_sorting_policy", "hierarchical_tactic_population", "scheduler_beam_search",
            "tactic_hint", "DefaultWithMaxNumUniqueShapes")
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        for setting in args.settings.split(","):
            with tempfile.TemporaryDirectory(prefix="furiosa-knobs-") as cache_dir:
                t0 = time.perf_counter()
                status, why = in_child(
                    lambda m=m, k=k, n=n, s=setting, d=cache_dir: compile_mm(m, k, n, s, d),
                    args.limit)
                wall = time.perf_counter() - t0
                print(f"mm [{m}, {k}] x [{k}, {n}] {setting}: {status} in {wall:.1f} s"
                      + (f" ({why})" if why else "") + f"; {recorded(cache_dir, keys)}; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
