"""Bad input through the real CLI: every case must give one stderr line, no traceback.

Runs ``python -m rngdctl ...`` in a subprocess for each case below (usage
errors, values out of range, unknown commands, run references that are no
run, a home that is a file, configs the trainer cannot place) against a fresh
home holding one finished run, and counts per case: exit code, stderr lines,
tracebacks. Prints one line per failing case and a summary line; exit 1 when
any case fails.

    .venv/bin/python bench/cli_bad_input.py [--json]

The cases are data (``CASES``): tests/spine/test_bad_input.py runs a sample of
them, this script runs them all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FILE = "@FILE"  # replaced by a path to a plain file
HOME = "@HOME"  # replaced by the fresh home's path

# (args after `rngdctl --home HOME` unless they start with "--home", expected exit code)
CASES: list[tuple[list[str], int]] = [
    # Missing options and arguments.
    (["submit"], 2),
    (["submit", "--cards", "1"], 2),
    (["submit", "--resident", "0"], 2),
    (["model", "--cards", "1", "--resident", "0"], 2),
    (["model", "--baseline", "1", "--resident", "0"], 2),
    (["model", "--baseline", "1", "--cards", "1"], 2),
    (["show"], 2),
    (["cancel"], 2),
    (["hold"], 2),
    (["release"], 2),
    (["move"], 2),
    (["move", "1"], 2),
    (["export"], 2),
    (["submit", "--cards"], 2),
    (["show", "1", "--json", "extra"], 2),
    # Values that are not numbers.
    (["submit", "--cards", "x", "--resident", "0"], 2),
    (["submit", "--cards", "1", "--resident", "one"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--steps", "abc"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--steps", "1.5"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--lr", "fast"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--seq-len", "1e3"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--accum", ""], 2),
    (["submit", "--cards", "1", "--resident", "0", "--seed", "0x10"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--deadline", "soon"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--lora", "r8"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--baseline-steps", "-"], 2),
    (["move", "1", "first"], 2),
    (["model", "--baseline", "1", "--cards", "two", "--resident", "0"], 2),
    (["model", "--baseline", "1", "--cards", "1", "--resident", "0", "--card-gb", "big"], 2),
    (["gates", "--cards", "many"], 2),
    (["daemon", "--tick", "fast"], 2),
    (["demo", "--steps", "lots"], 2),
    # Out of range.
    (["submit", "--cards", "0", "--resident", "0"], 2),
    (["submit", "--cards", "-1", "--resident", "0"], 2),
    (["submit", "--cards", "1", "--resident", "-1"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--steps", "0"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--steps", "-5"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--seq-len", "0"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--accum", "0"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--lr", "-1"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--lr", "nan"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--lr", "inf"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--deadline", "0"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--steps", "99999999999999999999"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--backend", "tpu"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--model", "no-such-model"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--data", "nsmc:/no/such/file"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--name", "\udcff"], 2),
    (["submit", "--cards", "1", "--resident", "0", "--model", "\udcff"], 2),
    (["submit", "--cards", "5", "--resident", "0"], 2),  # tiny-llama has 4 layers
    (["submit", "--cards", "2", "--resident", "3"], 2),  # a card's block is 2 layers
    (["submit", "--cards", "1", "--resident", "5"], 2),
    (["move", "1", "0"], 2),
    (["move", "1", "-3"], 2),
    (["model", "--baseline", "1", "--cards", "0", "--resident", "0"], 2),
    (["model", "--baseline", "1", "--cards", "1", "--resident", "-1"], 2),
    (["model", "--baseline", "1", "--cards", "1", "--resident", "0", "--card-gb", "0"], 2),
    (["gates", "--cards", "0"], 2),
    (["daemon", "--tick", "0"], 2),
    (["daemon", "--launcher", "slurm"], 2),
    (["demo", "--steps", "0"], 2),
    # Unknown commands and options.
    (["frobnicate"], 2),
    (["submitt"], 2),
    (["RUNS"], 2),
    (["runs", "--bogus"], 2),
    (["show", "1", "--yaml"], 2),
    (["--bogus", "runs"], 2),
    (["runs", "extra"], 2),
    # Run references that are no run.
    (["show", "99999999999999999999"], 2),
    (["show", "18446744073709551616"], 2),
    (["cancel", "18446744073709551616"], 2),
    (["show", "²"], 2),
    (["hold", "³"], 2),
    (["show", "٣"], 2),  # Arabic-Indic three: isdigit, not an id
    (["show", "12345"], 2),
    (["show", "-1"], 2),
    (["show", ""], 2),
    (["show", " "], 2),
    (["show", "no-such-name"], 2),
    (["show", "\udcff"], 2),  # the byte 0xff: not UTF-8, so no run's name
    (["cancel", "caf\udce9"], 2),
    (["release", "9223372036854775808"], 2),
    (["move", "99999999999999999999", "1"], 2),
    (["export", "99999999999999999999"], 2),
    (["model", "--baseline", "99999999999999999999", "--cards", "1", "--resident", "0"], 2),
    (["tui", "--snapshot", "--run", "99999999999999999999"], 2),
    # A home that is a file.
    (["--home", FILE, "runs"], 2),
    (["--home", FILE, "show", "1"], 2),
    (["--home", FILE, "submit", "--cards", "1", "--resident", "0"], 2),
    (["--home", FILE + "/sub", "runs"], 2),
    (["runs", "--home", FILE], 2),
    (["export", "1", "--out", FILE], 2),
]


def run_case(args: list[str], home: Path, file: Path, timeout: float = 60) -> dict:
    args = [a.replace(FILE, str(file)).replace(HOME, str(home)) for a in args]
    argv = args if args and args[0] == "--home" else ["--home", str(home), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RNGDCTL_HOME", None)
    proc = subprocess.run([sys.executable, "-m", "rngdctl", *argv], capture_output=True,
                          text=True, timeout=timeout, check=False, env=env, cwd=REPO)
    lines = proc.stderr.splitlines()
    return {"args": args, "rc": proc.returncode, "stderr_lines": len(lines),
            "traceback": "Traceback" in proc.stderr, "stderr": proc.stderr.strip()}


def fresh_home(root: Path) -> Path:
    """A home with one finished run (id 1), so that commands reach their checks."""
    from daemon.home import Home

    home = Home(root / "home").ensure()
    with home.store() as store:
        run_id = store.add_run({"model": "tiny-llama", "cards": 1, "resident": 0, "steps": 2,
                                "baseline": False}, name="done")
        store.finish_run(run_id, "done")
    return home.path


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = fresh_home(root)
        file = root / "a-file"
        file.write_text("not a folder\n")
        t0 = time.perf_counter()
        results = [{**run_case(args, home, file), "want_rc": rc} for args, rc in CASES]
        wall = time.perf_counter() - t0
    bad = [r for r in results
           if r["traceback"] or r["stderr_lines"] != 1 or r["rc"] != r["want_rc"]]
    if "--json" in argv:
        print(json.dumps(results, indent=1, ensure_ascii=False))
    for r in bad:
        print(f"FAIL rngdctl {' '.join(r['args'])}: exit {r['rc']} (want {r['want_rc']}), "
              f"{r['stderr_lines']} stderr lines{', traceback' if r['traceback'] else ''}: "
              f"{r['stderr'][-300:]!r}")
    tracebacks = sum(r["traceback"] for r in results)
    one_line = sum(r["stderr_lines"] == 1 for r in results)
    print(f"{len(results)} bad inputs: {tracebacks} tracebacks, {one_line} with exactly one "
          f"stderr line, {sum(r['rc'] == r['want_rc'] for r in results)} with the expected "
          f"exit code; {len(bad)} failing ({wall:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
