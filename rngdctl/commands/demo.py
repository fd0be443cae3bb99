"""The embedded default end to end: local launcher, CPU trainer, tiny model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from daemon.run.spec import baseline_steps
from daemon.store import CANCELLED, FINISHED

#: The demo's run. Its baseline is submit's default, chosen so that the step
#: model's error it prints is one a new user can believe on a busy laptop
#: (README "The demo's model error"): on cpu, beside the whole run, interleaved
#: with it in blocks of 2, after the trainer's untimed settling steps, so the
#: medians are over steps 6-60 of each pass, which shared the host's load.
DEMO_RUN = {
    "cards": 1, "resident": 2, "steps": 60, "baseline": True,
    "model": "tiny-llama", "data": "synthetic", "seq_len": 64, "accum": 2, "lr": 1e-3,
    "seed": 0, "backend": "cpu", "name": "demo",
}


def _progress_line(store, run_id: int) -> str:
    run = store.run(run_id)
    counts = store.step_counts(run_id)
    steps = store.steps(run_id, "main")
    last = steps[-1] if steps else None
    parts = [f"run {run_id} {run['status']}"]
    if "baseline" in counts:
        parts.append(f"baseline {counts['baseline']}/{baseline_steps(run['config'])}")
    parts.append(f"step {counts.get('main', 0)}/{run['config']['steps']}")
    if last:
        parts.append(f"loss {last['loss']:.4f}  {last['step_s']:.3f} s/step")
    return "  ".join(parts)


def _watch(home, run_id: int, daemon: subprocess.Popen, use_tui: bool) -> None:
    """Follow the run until the daemon exits: the TUI, then plain lines. Ctrl-C, in either,
    is a KeyboardInterrupt here."""
    if use_tui:
        try:
            from rngdctl.tui.app import INTERRUPTED, run_tui
        except ImportError:
            use_tui = False
    if use_tui and run_tui(home, run_id=run_id, demo=True) == INTERRUPTED:
        raise KeyboardInterrupt  # Ctrl-C in the TUI (a key there): as in plain lines
    # Quitting the TUI early leaves the run going: follow it in plain lines.
    shown = ""
    with home.store() as store:
        while daemon.poll() is None:
            line = _progress_line(store, run_id)
            if line != shown:
                click.echo(line)
                shown = line
            time.sleep(1.0)
        click.echo(_progress_line(store, run_id))


#: Seconds the demo waits for its daemon beyond ``[daemon] stop_grace_s`` (after which the
#: daemon SIGKILLs the trainer): the daemon's next tick, recording the end, its exit.
STOP_SLACK_S = 60.0


def _cancel(home, run_id: int, daemon: subprocess.Popen) -> str:
    """Ctrl-C: cancel the run and wait for its end; what happened, in one line.

    The cancel is stored as ``rngdctl cancel`` stores it. The daemon runs in a session
    of its own, so the terminal's SIGINT never reached it: it sends the trainer SIGTERM
    (which finishes its step and writes a checkpoint), records the run cancelled, and,
    with nothing left to do, exits. Only a daemon that does not is killed, with the
    trainer (the only way then that none trains on); the line says so.
    """
    with home.store() as store:
        store.request_cancel(run_id)
    click.echo(f"cancelling run {run_id}: its trainer finishes its step and writes a "
               f"checkpoint (Ctrl-C again changes nothing)", err=True)
    grace = _stop_grace(home)
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        deadline = time.monotonic() + grace + STOP_SLACK_S
        told = False
        while daemon.poll() is None and time.monotonic() < deadline:
            if pressed and not told:
                click.echo(f"still stopping run {run_id}: the daemon kills its trainer "
                           f"{grace:g} s after the SIGTERM at the latest", err=True)
                told = True
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGINT, previous)
    killed = None
    if daemon.poll() is None:  # a hung daemon: end it and the trainer, and say so
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
    with home.store() as store:
        run = store.run(run_id)
        if run["status"] not in FINISHED:
            killed = _kill_trainer(run)
        return _what_happened(store, run, home, killed)


def _stop_grace(home) -> float:
    from daemon.errors import ConfigError
    from daemon.home import DaemonConfig

    try:
        return home.config().daemon.stop_grace_s
    except ConfigError:
        return DaemonConfig().stop_grace_s


def _what_happened(store, run: dict, home, killed: int | None) -> str:
    """The run's end as the store has it: its status, last step and kept checkpoint."""
    run_id, status = run["id"], run["status"]
    if status not in FINISHED:
        trainer = f"its trainer (pid {killed}) was killed" if killed else "it has no trainer"
        return (f"run {run_id}: the daemon did not record the cancel in time; {trainer}, "
                f"and the store shows it {status} until a daemon next runs on {home.path}")
    steps = store.step_counts(run_id).get("main", 0)
    line = f"run {run_id} {status} " + (f"after step {steps} of {run['config']['steps']}"
                                        if steps else "before its first step")
    if status == CANCELLED:
        ends = store.events(run_id=run_id, kinds=["end"])
        kept = (ends[-1].get("data") or {}).get("checkpoint") if ends else None
        return line + (f"; checkpoint {kept} kept" if kept else "; no checkpoint was written")
    return line + " (it ended before the cancel took effect)"


def _kill_trainer(run: dict) -> int | None:
    """SIGKILL the run's trainer's process group, if the stored pid is still that process."""
    import psutil

    if not run.get("pid"):
        return None
    try:
        same = abs(psutil.Process(run["pid"]).create_time() - (run.get("pid_start") or 0)) < 0.01
        if same:
            os.killpg(run["pid"], signal.SIGKILL)
            return run["pid"]
    except (psutil.Error, ProcessLookupError, PermissionError):
        pass
    return None


def _took(run: dict) -> str:
    """The run's own time, launch to end, as the store has it (not the demo's, nor the
    time the TUI stayed open after it)."""
    if run.get("started") and run.get("ended"):
        return f" in {run['ended'] - run['started']:.0f} s"
    return ""


def _echo_model(home, run_id: int) -> None:
    """The step model against the run, as `rngdctl show` prints it."""
    from daemon import stepmodel
    from daemon.errors import ModelFitError
    from rngdctl.commands.runs import model_lines

    with home.store() as store:
        try:
            comparison = stepmodel.for_run(store, run_id)
        except ModelFitError as exc:
            click.echo(f"  step model: {exc}")
            return
    if comparison is not None:
        for line in model_lines(comparison.as_dict()):
            click.echo(line)


def _echo_saved(home, run_id: int) -> None:
    """Where the fine-tuned model is, and the one line of Python that loads it."""
    from daemon.run import output

    with home.store() as store:
        model = output.run_output(store, store.run(run_id)).model
    if model.ours:
        click.echo(f"model: {model.path}")
        click.echo(f'  load it: python -c "{model.load_line()}"')
    elif model.written:
        click.echo(f"model: {model.path}, now {output.state_words(model)}")


@click.command()
@click.option("--steps", type=click.IntRange(min=1), default=DEMO_RUN["steps"], show_default=True,
              help="Steps of the demo's run (its baseline takes as many).")
@click.option("--no-tui", is_flag=True, help="Print progress lines instead of opening the TUI.")
@click.option("--out", type=click.Path(file_okay=False),
              help="Where the note goes (default: HOME/experiments).")
@click.option("--home", "home_path", type=click.Path(file_okay=False),
              help="State folder (default: a fresh one in the temp folder).")
@click.pass_context
def demo(ctx, home_path, steps, no_tui, out):
    """Queue a short run, run the daemon with the local launcher, write its note.

    Uses a fresh home unless --home or RNGDCTL_HOME names one. Ctrl-C (in the TUI
    too) cancels the run, waits for its trainer to stop, says where, and exits 130.
    Example: rngdctl demo --no-tui
    """
    from daemon.home import Home
    from daemon.run.spec import validate
    from daemon.scheduling.queueing import free_name
    from rngdctl.export import write_note

    given = home_path or ctx.meta.get("rngdctl.home_given")
    home = Home(given or tempfile.mkdtemp(prefix="rngdctl-demo-")).ensure()
    with home.store() as store:
        name = free_name(store, DEMO_RUN["name"])  # demo-2 in a home that had a demo
        config = validate({**DEMO_RUN, "steps": steps, "name": name})
        run_id = store.add_run(config, name=name)
    click.echo(f"home {home.path}: queued run {run_id} ({steps} steps of tiny-llama on cpu, "
               f"interleaved with a {baseline_steps(config)}-step all-offload baseline); "
               f"the daemon's log is daemon.log there")
    with open(home.path / "daemon.log", "ab") as daemon_log:
        # A session of its own: the terminal's Ctrl-C (SIGINT to the foreground process
        # group) must not stop the daemon before the demo has stored the cancel it acts on.
        daemon = subprocess.Popen(
            [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon",
             "--launcher", "local", "--tick", "0.5", "--exit-when-idle"],
            stdout=daemon_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        try:
            _watch(home, run_id, daemon, use_tui=not no_tui and sys.stdout.isatty())
        except KeyboardInterrupt:
            click.echo(f"demo interrupted: {_cancel(home, run_id, daemon)}", err=True)
            raise SystemExit(130) from None  # as a shell reports a Ctrl-C
    with home.store() as store:
        run = store.run(run_id)
        note = (write_note(store, [run_id], Path(out) if out else home.path / "experiments")
                if store.step_counts(run_id) else None)  # export refuses a run with no step
    click.echo(f"run {run_id}: {run['status']}{_took(run)}")
    _echo_model(home, run_id)
    click.echo(f"note: {note}" if note else "note: none (the run stored no step)")
    _echo_saved(home, run_id)
    if run["status"] != "done":
        reason = (run["exit_reason"] or "").splitlines()
        raise click.ClickException(f"the demo run ended {run['status']}"
                                   + (f": {reason[0]}" if reason else ""))
