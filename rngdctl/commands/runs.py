"""Queue commands: submit, runs, show, cancel, hold, release, move.

These start fast: they import the store and click, never torch, textual or
the Kubernetes client.
"""

from __future__ import annotations

import time

import click

from rngdctl.options import echo_json, fmt, json_option, with_home
from rngdctl.units import rate, secs


def _ago(t: float | None, now: float) -> str:
    if t is None:
        return "–"
    s = max(0, now - t)
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} m ago"
    return f"{s / 3600:.1f} h ago"


class CardsParam(click.ParamType):
    """A number of cards, or ``best``: the plan's fastest config that fits the cards free now."""

    name = "N|best"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "best":
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is not a valid integer, nor 'best'", param, ctx)


@click.command()
@click.option("--cards", type=CardsParam(), required=True,
              help="Cards (one backend device each), or 'best': the fastest config that fits "
                   "the cards free now, by `rngdctl plan` (chooses --resident too).")
@click.option("--resident", type=int,
              help="Resident layers per card: their weights and AdamW state stay on the card "
                   "(default 0: every layer offloaded to the host).")
@click.option("--steps", type=int, help="Optimizer steps (default 200).")
@click.option("--baseline", is_flag=True, default=None,
              help="Run an all-offload pass first, in the same Job, for the step model.")
@click.option("--baseline-steps", type=int,
              help="Steps of the baseline pass (default: as many as --steps, at most 200 "
                   "when interleaved, 40 when not).")
@click.option("--interleave", type=int,
              help="With --baseline: alternate baseline and config in blocks of this many "
                   "steps, so host drift hits both (0: one after the other; default 2 on cpu, "
                   "0 on cards).")
@click.option("--model", help="tiny-llama, tiny-qwen2, llama-3.1-8b-mini, or a model folder.")
@click.option("--data", help="synthetic, nsmc:PATH, jsonl:PATH or a .jsonl file, "
                             "parquet:PATH or a .parquet file, datasets:DIR or a folder "
                             "datasets wrote: messages (the model's chat template), ShareGPT, "
                             "Alpaca, prompt/response or text.")
@click.option("--pack", is_flag=True, default=None,
              help="Fill each --seq-len row with several examples, each attending only to "
                   "itself (default: one example a row, padded).")
@click.option("--seq-len", type=int, help="Sequence length (default 512).")
@click.option("--accum", type=int, help="Gradient accumulation steps (default 4).")
@click.option("--lr", type=float, help="Peak learning rate (default 1e-5).")
@click.option("--seed", type=int, help="Seed for init and data order (default 0).")
@click.option("--lora", type=int, help="Train LoRA adapters of this rank instead of --full.")
@click.option("--backend", help="cpu, cuda[:N], furiosa:auto or furiosa:N (default cpu).")
@click.option("--merge", is_flag=True, default=None,
              help="With --lora: save merged full weights instead of the PEFT adapter.")
@click.option("--out", type=click.Path(file_okay=False),
              help="Folder for the fine-tuned model and its checkpoints (default: "
                   "HOME/runs/<id>/model; on k8s, the [k8s] output_volume).")
@click.option("--checkpoint-every", type=int, metavar="N",
              help="Write a checkpoint every N steps (default: only when stopped); "
                   "`rngdctl resume` goes on from the newest.")
@click.option("--keep-checkpoints", type=int, metavar="K",
              help="Checkpoints kept (default 2); the oldest goes once a new one is complete.")
@click.option("--eval-data", metavar="SPEC",
              help="Held-out data for the held-out loss (same forms as --data).")
@click.option("--eval-split", type=float, metavar="F",
              help="Hold out this fraction of --data (by example) for the held-out loss.")
@click.option("--eval-every", type=int, metavar="N",
              help="Held-out loss every N steps (default: before the first and after the "
                   "last).")
@click.option("--max-data-bytes", type=int, metavar="N",
              help="Refuse a --data or --eval-data file larger than this (default 256 MiB); "
                   "checked now and by the trainer.")
@click.option("--image", help="Container image (k8s launcher).")
@click.option("--deadline", type=int, help="Seconds before the run is stopped (timeout).")
@click.option("--precompile", is_flag=True, default=None,
              help="k8s: run `trainer compile` in a card-less Job first.")
@click.option("--name", help="A name to refer to the run by.")
@click.option("--node", help="k8s with node agents: run only on this node (default: the "
                             "passing node with the most cards free).")
@click.option("--after", "after", metavar="RUN",
              help="Start only once RUN is done (Slurm's afterok); if RUN fails or is "
                   "cancelled, this run is cancelled with the reason.")
@click.option("--priority", type=int, default=0, show_default=True,
              help="Higher runs launch first; equal priorities keep queue order (see move).")
@click.option("--notify", metavar="CMD",
              help="Run CMD (no shell) when the run starts, ends, or its gates clear after a "
                   "long block; {id} {status} {name} ... in CMD are filled in (see README). "
                   "Default: config.toml's [notify] command; '' for none.")
@json_option
@with_home
def submit(home, as_json, after, priority, notify, **options):
    """Queue a run; prints its id.

    Example: rngdctl submit --cards 2 --resident 1 --steps 200 --baseline
    """
    from daemon.run.host_fit import Host
    from daemon.run.spec import validate
    from daemon.scheduling.queueing import queue_run

    with home.store() as store:
        chosen = None
        if options["cards"] == "best":
            from rngdctl.commands.plan import choose_best

            chosen = choose_best(home, store, options)
            options = {**options, "cards": chosen.best.cards, "resident": chosen.best.resident}
        config = validate(options, host=Host.of(home.config()))
        run_id = queue_run(store, config, after=after, priority=priority, notify=notify)
        store_after = store.run(run_id)["after_run"]
        position = store.queue_position(run_id)
    if chosen is not None and not as_json:
        # stderr: stdout stays the run id alone, for scripts.
        click.echo(f"chose {chosen.best.cards} card{'s' if chosen.best.cards != 1 else ''} x "
                   f"{chosen.best.resident} resident ({secs(chosen.best.step_s)} a step "
                   f"predicted from run {chosen.baseline_run}, {chosen.priced.words()}): "
                   f"{chosen.why}", err=True)
    if as_json:
        echo_json({"id": run_id, "status": "queued", "position": position, "config": config,
                   "after_run": store_after, "priority": priority, "notify": notify,
                   **({"chosen": {"cards": chosen.best.cards, "resident": chosen.best.resident,
                                  "step_s": chosen.best.step_s, "why": chosen.why,
                                  "baseline_run": chosen.baseline_run,
                                  "priced": chosen.priced.as_dict()}} if chosen else {})})
    else:
        click.echo(run_id)


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Every run, not only the last 50.")
@json_option
@with_home
def runs(home, as_json, show_all):
    """List runs, newest first.

    Example: rngdctl runs --json
    """
    from daemon.scheduling import liveness, replicas
    from daemon.scheduling.estimate import queue_estimates
    from daemon.store import ACTIVE

    now = time.time()
    with home.store() as store:
        rows = store.runs(limit=None if show_all else 50)
        counts = store.step_counts_of(r["id"] for r in rows)
        live = liveness.for_home(home, store, now)
        leads = replicas.for_home(home, store, now).line()
        estimates = {e.run_id: e for e in queue_estimates(store, now)}

    def as_of(run: dict) -> float | None:
        # An active status is only kept current by a running daemon.
        return live.as_of if run["status"] in ACTIVE else None

    if as_json:
        echo_json([{**r, "steps_done": counts[r["id"]].get("main", 0), "as_of": as_of(r),
                    **({"estimate": estimates[r["id"]].as_dict()} if r["id"] in estimates
                       else {})} for r in rows])
        return
    stale = [r for r in rows if as_of(r) is not None]
    if leads:
        click.echo(leads)
    if not live.running:
        click.echo(live.summary(now) + ("; a status marked * is as of then" if stale else ""))
    if not rows:
        click.echo("no runs")
        return
    click.echo(f"{'id':>4}  {'name':<16} {'status':<10} {'cards':>5} {'res':>4} "
               f"{'steps':>11}  {'model':<16} created")
    for r in rows:
        c = r["config"]
        progress = f"{counts[r['id']].get('main', 0)}/{c['steps']}"
        status = r["status"] + ("*" if as_of(r) is not None else "")
        click.echo(f"{r['id']:>4}  {(r['name'] or '–')[:16]:<16} {status:<10} "
                   f"{c['cards']:>5} {c['resident']:>4} {progress:>11}  "
                   f"{str(c['model'])[-16:]:<16} {_ago(r['created'], now)}"
                   + (f"  on {r['node']}" if r["status"] in ACTIVE and r.get("node") else "")
                   + (f"  {_estimate_text(estimates[r['id']])}" if r["id"] in estimates else ""))


class _Est:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


def _estimate_text(e) -> str:
    if e.start is None:
        return f"#{e.position}, no estimate"
    return f"#{e.position}, start ~{_clock(e.start)}, end ~{_clock(e.end)}"


def run_details(store, run_ref, live) -> dict:
    """Everything ``show`` prints, as data; ``live``: the daemon's Liveness."""
    from daemon.run import output
    from daemon.store import ACTIVE, QUEUED

    run = store.run(run_ref)
    counts, all_checks = store.step_counts(run["id"]), store.gate_checks(run_id=run["id"])
    numbers, load_range = {}, None
    if counts or all_checks:
        # Loaded only where there is something to compute: a queued run that no daemon
        # has checked yet has no steps and no checks (about 5 ms of start-up).
        from daemon.stepmodel import stats

        numbers = {label: stats.pass_stats(store, run["id"], label) for label in sorted(counts)}
        load_range = stats.gate_load_range(all_checks)
    passes = {label: p.summary(run["config"]["steps"] if label == "main" else None).as_dict()
              for label, p in numbers.items()}
    checks = store.gate_checks(run_id=run["id"], limit=5)
    model = None
    if "main" in numbers and "baseline" in numbers:  # a model row: only then load the model
        from daemon import stepmodel
        from daemon.errors import ModelFitError

        try:
            comparison = stepmodel.for_run(store, run["id"], main=numbers["main"],
                                           baseline=numbers["baseline"])
            model = comparison.as_dict() if comparison else None
        except ModelFitError as exc:
            model = {"error_message": str(exc)}
    waiting = None
    if run["status"] == QUEUED and checks and not checks[-1]["passed"]:
        from daemon.gates.rules import node_verdicts

        since = store.blocked_since(run["id"])
        blocking = [g for g in checks[-1]["gates"] if g["verdict"] == "fail"]
        # No daemon: nobody checks any more, so the verdict and its duration stop
        # at the last stored check.
        last = checks[-1].get("last_time") or checks[-1]["time"]  # a folded run: its last
        waiting = {"blocked_since": since, "as_of": None if live.running else last,
                   "blocked_by": [f"{g['name']}: {g['detail']}" for g in blocking],
                   **node_verdicts(checks[-1]["gates"])}  # with node agents
    from daemon.scheduling.queueing import waiting_for

    estimate = None
    if run["status"] == QUEUED:
        from daemon.scheduling.estimate import queue_estimates

        estimate = next((e.as_dict() for e in queue_estimates(store, time.time())
                         if e.run_id == run["id"]), None)
    return {
        "estimate": estimate,
        "stored_estimate": store.estimate(run["id"]),
        "run": run,
        "daemon": live.as_dict(),
        "active": run["status"] in ACTIVE,
        "waiting": waiting,
        "after": waiting_for(store, run),
        "passes": passes,
        "gate_checks": checks,
        "pre_submit_load_range": load_range,
        "load_range": store.sample_load_range(run["id"]),
        "cards": store.card_ranges(run["id"]),
        "events": store.events(run_id=run["id"], limit=20),
        "model": model,
        "output": output.run_output(store, run),  # as_dict(): "output" and "resumes"
        "evals": output.held_out(store, run["id"]),
    }


def output_lines(run: dict, found, held) -> list[str]:
    """The run's model folder, its checkpoints, its resumes and its held-out loss."""
    from daemon.run import output
    from daemon.store import FINISHED

    lines = [f"  output: {output.model_words(found, finished=run['status'] in FINISHED)}"]
    if found.model.ours:  # never a load line for a model that is not this run's
        lines.append(f"    load: {found.model.load_line()}")
    for title, words in (("checkpoints", output.checkpoints_words(found)),
                         (None, output.resumes_words(found)),
                         ("held-out loss", output.held_out_words(held))):
        if words:
            lines.append(f"  {title}: {words}" if title else f"  {words}")
    return lines


def model_lines(model: dict) -> list[str]:
    """The step model against the run: the error, then each phase measured against predicted."""
    from daemon.stepmodel import format_verdict

    # The measured figure under its own name: the paired estimate is not the median the
    # pass line above gives (stepmodel.Comparison.measured_name).
    lines = [(f"  step model (from the baseline pass): model {secs(model['model_s'])}, "
              f"measured {secs(model['measured_s'])} ({model['measured_words']}), error "
              f"{format_verdict(model['error'], model.get('interval'))}")]
    split = model.get("split") or []
    if split:
        lines.append(f"    {'phase':<13} {'model':>9} {'measured':>9} {'share of error':>15}")
        lines += [f"    {r['phase']:<13} {secs(r['model_s']):>9} {secs(r['measured_s']):>9} "
                  f"{_share(r.get('share')):>15}" for r in split]
    if model.get("host_notice"):
        lines.append(f"    ! {model['host_notice']}")
    return lines


def card_lines(cards: list[dict]) -> list[str]:
    """Each card the run held: its temperature, power and utilization range, and when it
    throttled (furiosa-smi's readings, daemon/probes/card_sampler.py)."""
    from rngdctl import card_units

    if not cards:
        return []
    lines = ["  cards during the run (furiosa-smi):"]
    for row in cards:
        lines.append(f"    {card_units.card_range(row)} ({row['readings']} readings)")
        throttled = card_units.throttle_text(row)
        if throttled:
            lines.append(f"    ! {throttled}, {_clock_s(row['throttled_from'])}–"
                         f"{_clock_s(row['throttled_until'])}")
    return lines


def _clock_s(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _share(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f} %"


@click.command()
@click.argument("run_ref", metavar="RUN")
@json_option
@with_home
def show(home, as_json, run_ref):
    """Status, config, progress, step time, tok/s, loss, gate checks and events of a run.

    Example: rngdctl show 3
    """
    from daemon.scheduling import liveness, replicas
    from daemon.store import FINISHED

    now = time.time()
    with home.store() as store:
        live = liveness.for_home(home, store, now)
        details = run_details(store, run_ref, live)
        details["replicas"] = replicas.for_home(home, store, now).as_dict()
    if as_json:
        echo_json({**details, **details["output"].as_dict(), "evals": details["evals"].as_dict()})
        return
    run = details["run"]
    c = run["config"]
    click.echo(f"run {run['id']}" + (f" ({run['name']})" if run["name"] else "")
               + f": {run['status']}" + (f", attempt {run['attempts']}" if run["attempts"] else ""))
    if details["replicas"]["text"]:
        click.echo(f"  {details['replicas']['text']}")
    if not live.running:
        click.echo(f"  {live.summary(now)}"
                   + ("" if run["status"] in FINISHED else ": this status is as of then"))
    if run.get("node") and run["status"] != "queued":
        click.echo(f"  node: {run['node']}")
    if run.get("exit_reason"):
        click.echo(f"  reason: {run['exit_reason'].splitlines()[0]}")
    if details["after"]:
        click.echo(f"  {details['after']['text']}")
    est = details["estimate"]
    if est:
        click.echo(f"  queue: {_estimate_text(_Est(**est))}")
        click.echo(f"    rests on: {est['basis']}")
    stored = details["stored_estimate"]
    if stored and stored.get("end_error") is not None:
        click.echo(f"  estimate made {_clock(stored['made'])}: start ~{_clock(stored['start'])}, "
                   f"end ~{_clock(stored['end'])}; error (estimated - actual) start "
                   f"{stored['start_error']:+.0f} s, end {stored['end_error']:+.0f} s")
    if run.get("priority"):
        click.echo(f"  priority {run['priority']}")
    waiting = details["waiting"]
    if waiting:
        since, as_of = waiting["blocked_since"], waiting["as_of"]
        until = as_of if as_of is not None else now
        where = ""
        if waiting.get("node"):
            where = f"{'pinned' if c.get('node') else 'closest'} node {waiting['node']}: "
        click.echo(f"  blocked{' ' + _ago(since, until).removesuffix(' ago') if since else ''}"
                   + (f" as of {liveness.when(as_of)}" if as_of is not None else "")
                   + f": {where}{'; '.join(waiting['blocked_by'])}")
        for line in waiting.get("nodes") or []:
            click.echo(f"    {line}")
    click.echo("  config: " + ", ".join(f"{k}={c[k]}" for k in (
        "model", "cards", "resident", "steps", "seq_len", "accum", "lr", "data", "seed",
        "backend", "baseline", "node") if k in c))
    for label, p in details["passes"].items():
        total = f"/{p['steps_total']}" if p["steps_total"] else ""
        iqr = p["iqr_step_s"]
        click.echo(
            f"  {label}: {p['steps_done']}{total} steps, median step (6-N) "
            f"{secs(p['median_step_s'])}"
            + (f" [IQR {secs(iqr[0])}-{secs(iqr[1])}]" if iqr else "")
            + f", {rate(p['tokens_per_s'])} tok/s, last loss {fmt(p['last_loss'], '.4f')}"
            + (f", {p['nonfinite_losses']} non-finite losses" if p["nonfinite_losses"] else ""))
    for line in output_lines(run, details["output"], details["evals"]):
        click.echo(line)
    model = details["model"]
    if model and "error_message" in model:
        click.echo(f"  step model: {model['error_message']}")
    elif model:
        for line in model_lines(model):
            click.echo(line)
    lr = details["load_range"]
    if lr:
        click.echo(f"  host load during the run: {lr[0]:.1f}-{lr[1]:.1f}")
    for line in card_lines(details["cards"]):
        click.echo(line)
    if details["gate_checks"]:
        click.echo("  gate checks (latest):" if live.running else
                   f"  gate checks (stored; as of {liveness.when(live.as_of)}, not current):")
        for check in details["gate_checks"][-3:]:
            verdicts = ", ".join(f"{g['name']} {g['verdict']} ({fmt(g['reading'])})"
                                 for g in check["gates"])
            folded = (f" (x{check['count']} until "
                      f"{time.strftime('%H:%M:%S', time.localtime(check['last_time']))})"
                      if check.get("count") else "")
            click.echo(f"    {time.strftime('%H:%M:%S', time.localtime(check['time']))} "
                       f"{'pass' if check['passed'] else 'BLOCKED'}{folded}: {verdicts}")
    if details["events"]:
        click.echo("  events:")
        for e in details["events"][-10:]:
            click.echo(f"    {time.strftime('%H:%M:%S', time.localtime(e['time']))} "
                       f"{e['kind']}: {e['message'].splitlines()[0][:120]}")


@click.command()
@click.argument("run_ref", metavar="RUN")
@with_home
def cancel(home, run_ref):
    """Cancel a run: at once when queued, through the daemon when it runs.

    Example: rngdctl cancel 3
    """
    from daemon.errors import BadInput

    with home.store() as store:
        run = store.run(run_ref)
        result = store.request_cancel(run["id"])
    if result == "cancelled":
        click.echo(f"run {run['id']} cancelled")
    elif result == "requested":
        click.echo(f"run {run['id']}: cancel requested; the daemon stops it within a tick")
    else:
        raise BadInput(f"run {run['id']} has {result.replace('already', 'already ended:')}")


def _queued(store, run_ref) -> dict:
    from daemon.errors import BadInput
    from daemon.store import QUEUED

    run = store.run(run_ref)
    if run["status"] != QUEUED:
        raise BadInput(f"run {run['id']} is {run['status']}, not queued")
    return run


@click.command()
@click.argument("run_ref", metavar="RUN")
@with_home
def hold(home, run_ref):
    """Keep a queued run from launching until it is released.

    Example: rngdctl hold 3
    """
    with home.store() as store:
        run = _queued(store, run_ref)
        store.set_held(run["id"], True)
    click.echo(f"run {run['id']} held")


@click.command()
@click.argument("run_ref", metavar="RUN")
@with_home
def release(home, run_ref):
    """Let a held run launch again.

    Example: rngdctl release 3
    """
    with home.store() as store:
        run = _queued(store, run_ref)
        store.set_held(run["id"], False)
    click.echo(f"run {run['id']} released")


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.argument("position", type=click.IntRange(min=1))
@with_home
def move(home, run_ref, position):
    """Move a queued run to POSITION in the queue (1 is the head).

    Example: rngdctl move 5 1
    """
    with home.store() as store:
        run = _queued(store, run_ref)
        now = [r["id"] for r in store.queue()].index(run["id"]) + 1
        store.move(run["id"], position - now)
        queue = store.queue()
        position = [r["id"] for r in queue].index(run["id"]) + 1
    ahead = [r for r in queue[:position - 1] if r["priority"] > run["priority"]]
    click.echo(f"run {run['id']} is now at position {position}"
               + (f" ({len(ahead)} run{'s' if len(ahead) != 1 else ''} of higher priority "
                  "ahead: see --priority)" if ahead else ""))
