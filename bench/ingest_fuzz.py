"""Hostile lines through the real reader: 0 exceptions, every line accounted for.

Writes N lines (default 6,000) to a run's output.log: valid steps with unique
step numbers, valid start/event/end records (some with lone surrogates), plain
log lines, and hostile records built to break the reader (integers past 64
bits, 1e300, "nan"/"inf" in every numeric field and in time, lone surrogates
in strings, keys and labels, nesting from 20 to 3,000 levels, wrong types,
unknown kinds, newer schema versions, invalid UTF-8, truncated JSON). Then it
reads the file as the local launcher does: LineSplitter over random-sized
chunks, Ingest.feed, a real SQLite store. Checks: no exception escapes, every
valid step is stored exactly once, every hostile record is counted malformed,
every plain line comes back as a log line.

    .venv/bin/python bench/ingest_fuzz.py [--lines 6000] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

from daemon.run.ingest import Ingest
from daemon.store import Store
from trainer import records

STEP, RECORD, LOG, MALFORMED = "step", "record", "log", "malformed"
NUMERIC = ("step", "loss", "step_s", "tokens", "lr")


class Lines:
    """Generates lines and remembers what each one must become."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.next_step = 1
        self.out: list[tuple[bytes, str]] = []

    def add(self, line: str | bytes, expect: str) -> None:
        raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
        assert b"\n" not in raw
        self.out.append((raw, expect))

    def step_dict(self, **over) -> dict:
        d = {"kind": "step", "v": 1, "config_label": self.rng.choice(["main", "baseline"]),
             "step": self.next_step, "loss": self.rng.uniform(0.1, 9), "step_s": 0.5,
             "tokens": 512, "lr": 1e-5, "phases": {"fwd_bwd": 0.4}, "memory": {"rss": 1},
             "time": 1.7e9 + self.next_step}
        d.update(over)
        return d

    def valid_step(self) -> None:
        d = self.step_dict()
        if self.rng.random() < 0.1:
            d["loss"] = self.rng.choice(["nan", "inf", "-inf"])
        if self.rng.random() < 0.1:
            d["config_label"] = "lab\ud800el"  # a lone surrogate: kept as U+FFFD
        self.next_step += 1
        self.add(json.dumps(d, ensure_ascii=self.rng.random() < 0.5), STEP)

    def valid_record(self) -> None:
        r = self.rng.random()
        if r < 0.3:
            d = {"kind": "start", "config": {"cards": 1, "x\udc00": "\ud83d"}}
        elif r < 0.8:
            d = {"kind": "event", "event": "warn", "message": f"m{self.rng.random()} \udfff",
                 "data": {"\ud800": [1, 2, {"a": None}]}, "time": self.rng.uniform(0, 2e9)}
        else:
            d = {"kind": "end", "status": self.rng.choice(["ok", "error"]), "error": "e\ud800"}
        self.add(json.dumps(d, ensure_ascii=self.rng.random() < 0.5), RECORD)

    def log_line(self) -> None:
        choices = [
            "Loading model...", "", "   ", "리뷰 감성 분석",
            "[" * self.rng.randint(1, 5000),  # not an object: plain text
            '{"kind": "step", "step": 1',  # truncated JSON
            '{"loss": 1.0}',  # JSON without kind
            "{not json at all}",
            '{"kind": "step", "step": NaN_',
        ]
        line = self.rng.choice(choices)
        if self.rng.random() < 0.2:
            self.add(line.encode() + bytes([0xff, 0xfe, 0xc3]), LOG)  # invalid UTF-8
        else:
            self.add(line, LOG)

    def hostile(self) -> None:
        rng = self.rng
        kind = rng.randrange(12)
        if kind == 0:  # integers past 64 bits, or integer-valued floats past them
            field = rng.choice(["step", "tokens"])
            value = rng.choice([2**63, 2**64 + 1, -2**63 - 1, 10**30])
            line = json.dumps(self.step_dict(**{field: value}))
            if rng.random() < 0.5:
                line = line.replace(str(value), rng.choice(["1e300", "9.3e18", "-1e19"]))
        elif kind == 1:  # nan/inf in a field that must be finite
            field = rng.choice(["step_s", "lr", "time"])
            line = json.dumps(self.step_dict(**{field: rng.choice(["nan", "inf", "-inf"])}))
        elif kind == 2:  # a nan time on an event or end, or on a NaN-loss step
            line = rng.choice([
                '{"kind":"event","event":"e","message":"m","time":"nan"}',
                '{"kind":"end","status":"error","time":"nan"}',
                json.dumps(self.step_dict(loss="nan", time="nan"))])
        elif kind == 3:  # deep nesting, below and above what json.loads can read
            depth = rng.choice([33, 100, 999, 1000, 3000])
            kind_name = rng.choice(["event", "step", "start"])
            line = f'{{"kind":"{kind_name}","data":' + "[" * depth + "]" * depth + "}"
        elif kind == 4:  # wrong types in the numeric fields
            field = rng.choice(NUMERIC)
            value = rng.choice([None, True, [], {}, "x", "12", 1.5 if field in
                                ("step", "tokens") else "abc"])
            line = json.dumps(self.step_dict(**{field: value}))
        elif kind == 5:  # a missing field
            d = self.step_dict()
            del d[rng.choice(NUMERIC)]
            line = json.dumps(d)
        elif kind == 6:  # unknown kinds, newer versions, a non-string kind
            line = rng.choice(['{"kind":"metrics"}', '{"kind":"end","v":99,"status":"ok"}',
                               '{"kind":[1],"v":1}', '{"kind":null}',
                               '{"kind":"step","v":"1"}'])
        elif kind == 7:  # step < 1, tokens < 0
            line = json.dumps(self.step_dict(**rng.choice([{"step": 0}, {"step": -5},
                                                           {"tokens": -1}])))
        elif kind == 8:  # wrong container types
            line = rng.choice([
                json.dumps(self.step_dict(phases=[1, 2])),
                json.dumps(self.step_dict(phases={"fwd_bwd": "fast"})),
                json.dumps(self.step_dict(memory="lots")),
                '{"kind":"event","data":[1]}', '{"kind":"end","status":"ok","data":"x"}',
                '{"kind":"start","config":"main"}', '{"kind":"start","versions":[1],"config":{}}',
            ])
        elif kind == 9:  # end without status, label of the wrong type
            line = rng.choice(['{"kind":"end"}', '{"kind":"end","status":""}',
                               json.dumps(self.step_dict(config_label=5))])
        elif kind == 10:  # start whose git or host is not a string
            line = rng.choice(['{"kind":"start","config":{},"git":{"a":1}}',
                               '{"kind":"start","config":{},"host":[1]}'])
        else:  # a float too large for a float
            field = rng.choice(["loss", "step_s", "lr"])
            line = json.dumps(self.step_dict(**{field: 1})).replace(
                f'"{field}": 1', f'"{field}": 1{"0" * 400}')
        self.add(line, MALFORMED)


def generate(n: int, seed: int) -> list[tuple[bytes, str]]:
    rng = random.Random(seed)
    lines = Lines(rng)
    makers = [(0.30, lines.valid_step), (0.10, lines.valid_record), (0.10, lines.log_line),
              (0.50, lines.hostile)]
    while len(lines.out) < n:
        r, acc = rng.random(), 0.0
        for weight, make in makers:
            acc += weight
            if r < acc:
                make()
                break
    return lines.out


def read_like_the_launcher(store: Store, run_id: int, path: Path, rng: random.Random):
    """LineSplitter over random-sized chunks into Ingest.feed, as local.py reads a log."""
    ingest = Ingest(store)
    splitter = records.LineSplitter()
    totals = {"new_steps": 0, "malformed": 0, "log": 0, "exceptions": 0, "feeds": 0}
    with open(path, "rb") as f:
        while chunk := f.read(rng.randint(1, 64 << 10)):
            lines = splitter.feed(chunk)
            if not lines:
                continue
            totals["feeds"] += 1
            try:
                fed = ingest.feed(run_id, lines)
            except Exception:  # noqa: BLE001 - counting exceptions is the point
                totals["exceptions"] += 1
                traceback.print_exc()
                continue
            totals["new_steps"] += fed.new_steps
            totals["malformed"] += fed.malformed
            totals["log"] += len(fed.log_lines)
            store.update_run(run_id, log_offset=splitter.offset)
    return totals, splitter


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    lines = generate(args.lines, args.seed)
    expect = {k: sum(1 for _, e in lines if e == k) for k in (STEP, RECORD, LOG, MALFORMED)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "output.log"
        path.write_bytes(b"".join(raw + b"\n" for raw, _ in lines))
        with Store(Path(tmp) / "rngdctl.db") as store:
            run_id = store.add_run({"cards": 1})
            t0 = time.perf_counter()
            totals, splitter = read_like_the_launcher(store, run_id, path,
                                                      random.Random(args.seed))
            seconds = time.perf_counter() - t0
            stored = [(s["config_label"], s["step"]) for s in store.steps(run_id, None)]
            run = store.run(run_id)
    steps = sorted(n for _, n in stored)
    checks = {
        "exceptions == 0": totals["exceptions"] == 0,
        "offset at the end of the file": splitter.offset == path_size(lines),
        "every valid step stored exactly once": steps == list(range(1, expect[STEP] + 1)),
        "new steps reported == valid steps": totals["new_steps"] == expect[STEP],
        "malformed counted == hostile lines": totals["malformed"] == expect[MALFORMED]
        == run["malformed"],
        "log lines returned == plain lines": totals["log"] == expect[LOG],
    }
    print(f"{len(lines)} lines ({expect[STEP]} valid steps, {expect[RECORD]} valid "
          f"start/event/end, {expect[LOG]} plain, {expect[MALFORMED]} hostile), seed "
          f"{args.seed}, {totals['feeds']} feeds, {seconds:.2f} s")
    print(f"exceptions {totals['exceptions']}, steps stored {len(stored)} "
          f"(distinct {len(set(stored))}), malformed counted {run['malformed']}, "
          f"log lines {totals['log']}")
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


def path_size(lines: list[tuple[bytes, str]]) -> int:
    return sum(len(raw) + 1 for raw, _ in lines)


if __name__ == "__main__":
    sys.exit(main())
