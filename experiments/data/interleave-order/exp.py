"""Experiment: why the interleaved baseline's fwd_bwd ran slower than the same config's.

Each sample is one fresh trainer process (tiny-llama, 40 + 40 steps, seq 64, accum 2,
settle 60, interleave 5) with the passes' order and build varied in process:
  abab / baba / abba    block order (baseline first / main first / mirrored pairs)
  swapbuild-abba        the main's engine built before the baseline's
  keep-abba             the settling engine kept alive (the timed ones get fresh memory)
  nosettle-abba         no settling
  long-*                settle at least 3 s of steps
With CLOCK=cpu every phase and step is timed with the thread's CPU time
(time.thread_time) instead of the wall clock, so a loaded host's preemption drops out.

    CLOCK=cpu OUT=steps.jsonl python exp.py run 30 tiny-llama 1 0 abab baba abba
    python analyse.py steps.jsonl
"""
import io
import json
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, REPO)

def child(variant, model, cards, resident, out):
    import trainer.train as T
    from trainer.config import TrainConfig
    from trainer.records import RecordWriter
    from trainer.train import Recipe
    settle = 60
    if variant.startswith("long"):
        settle = 400
    if variant.startswith("nosettle"):
        settle = 0
    cfg = TrainConfig(model=model, backend=",".join(["cpu"] * cards), resident_layers=resident,
                      steps=40, baseline=True, baseline_steps=40, seq_len=64, accum=2,
                      lr=1e-4, interleave=5, settle=settle)
    if variant.startswith("long"):
        # settle for at least 3 s of steps and the rule
        orig = T.settled_by_rule

        def rule(times, *a, **k):
            return sum(times) >= 3.0 and orig(times, *a, **k)
        T.settled_by_rule = rule
    if os.environ.get("CLOCK") == "cpu":
        import time as _t
        import types
        shim = types.SimpleNamespace(**{k: getattr(_t, k) for k in dir(_t) if not k.startswith("__")})
        shim.perf_counter = _t.thread_time
        import trainer.engine.layer_engine as E
        E.time = shim
        T.time = shim
    buf = io.StringIO()
    r = Recipe(cfg, RecordWriter(buf))
    if variant.startswith("keep"):
        kept = []
        orig_build = r.build_engine
        def build(resident):
            e = orig_build(resident)
            if not kept:
                kept.append(e)  # the settle engine stays alive: the timed ones get fresh memory
            return e
        r.build_engine = build
    r.setup()
    kind = variant.split("-")[-1]
    def run_interleaved(passes, block):
        for p in (passes[::-1] if variant.startswith("swapbuild") else passes):
            p.begin()

        if kind == "abab":
            seq = lambda i: passes
        elif kind == "baba":
            seq = lambda i: passes[::-1]
        elif kind == "abba":
            seq = lambda i: passes if i % 2 == 0 else passes[::-1]
        i = 0
        while not all(p.done for p in passes):
            for p in seq(i):
                for _ in range(block):
                    if p.done:
                        break
                    p.step()
            i += 1
        return [p.finish() for p in passes]
    r.run_interleaved = run_interleaved
    r.run()
    recs = [json.loads(l) for l in buf.getvalue().splitlines()]
    with open(out, "a") as f:
        settle_ev = [x for x in recs if x["kind"] == "event" and x["event"] == "settle"]
        steps = [{"p": x["config_label"], "s": x["step"], "t": x["step_s"], "f": x["phases"]["fwd_bwd"]}
                 for x in recs if x["kind"] == "step"]
        f.write(json.dumps({"variant": variant, "model": model, "cards": cards, "resident": resident,
                            "settle": settle_ev[0]["data"] if settle_ev else None,
                            "steps": steps, "load": os.getloadavg()[0]}) + "\n")

def main():
    if sys.argv[1] == "child":
        v, m, c, r, out = sys.argv[2:7]
        child(v, m, int(c), int(r), out)
        return
    n = int(sys.argv[2]); model = sys.argv[3]; cards = int(sys.argv[4]); res = int(sys.argv[5])
    variants = sys.argv[6:]
    out = os.environ.get("OUT", "steps.jsonl")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for i in range(n):
        for v in variants:
            subprocess.run(["nice", "-n", "5", os.path.join(REPO, ".venv", "bin", "python"), __file__, "child", v,
                            model, str(cards), str(res), out], env=env, check=True, timeout=600)

if __name__ == "__main__":
    main()
