"""Summaries of exp.py's samples: per variant, the main's fwd_bwd over the baseline's
(plain medians of steps 6-40; true value 0, the configs are the same), and over all
samples the step-time error with plain medians against stepmodel.paired.

    python analyse.py steps.jsonl.gz
"""
import collections
import gzip
import json
import math
import os
import statistics as S
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
from daemon import stepmodel

path = sys.argv[1]
rows = [json.loads(line) for line in (gzip.open if path.endswith(".gz") else open)(path, "rt")]
by = collections.defaultdict(list)
for r in rows:
    by[r["variant"]].append(r)


def median_of(steps, label, key):
    return S.median(x[key] for x in steps if x["p"] == label and x["s"] >= 6)


print("variant | samples | main/baseline fwd_bwd - 1: median, mean, standard error")
for v, rs in sorted(by.items()):
    moved = [median_of(r["steps"], "main", "f") / median_of(r["steps"], "baseline", "f") - 1
             for r in rs]
    print(f"{v} | {len(rs)} | {100 * S.median(moved):+.2f} %, {100 * S.mean(moved):+.2f} %, "
          f"{100 * S.pstdev(moved) / math.sqrt(len(moved)):.2f} %")

plain, paired = [], []
for r in rows:
    passes = {label: [{"step": x["s"], "step_s": x["t"]} for x in r["steps"] if x["p"] == label]
              for label in ("baseline", "main")}
    base = median_of(r["steps"], "baseline", "t")
    plain.append(base / median_of(r["steps"], "main", "t") - 1)
    paired.append(base / stepmodel.paired(passes["baseline"], passes["main"], 5)[0]["step_s"] - 1)
for name, e in (("plain medians", plain), ("block pairs", paired)):
    print(f"{name}: {len(e)} samples, median |error| {100 * S.median(map(abs, e)):.2f} %, "
          f"within 2 % {100 * sum(abs(x) <= .02 for x in e) / len(e):.0f} %, "
          f"within 3 % {100 * sum(abs(x) <= .03 for x in e) / len(e):.0f} %, "
          f"worst {100 * max(map(abs, e)):.2f} %")
