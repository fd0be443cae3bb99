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
    if use_tui:
        try:
            from rngdctl.tui.app import run_tui
        except ImportError:
            use_tui = False
    if use_tui:
        run_tui(home, run_id=run_id)
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


def _stop(home, run_id: int, daemon: subprocess.Popen) -> None:
    """Cancel the demo's run through the daemon, which then exits; kill both if it does not.

    The trainer runs in a session of its own (it outlives a daemon that dies, to be
    adopted), so killing the daemon alone would leave it training: the demo kills
    it too, by the pid and start time the daemon stored.
    """
    with home.store() as store:
        store.request_cancel(run_id)
    try:
        # Generous: on a loaded host the trainer's cancel path and the daemon's next
        # tick can take a while; a kill is only the last resort.
        daemon.wait(timeout=120)
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        daemon.kill()
        daemon.wait()
        with home.store() as store:
            _kill_trainer(store.run(run_id))


def _kill_trainer(run: dict) -> None:
    import psutil

    if not run.get("pid"):
        return
    try:
        same = abs(psutil.Process(run["pid"]).create_time() - (run.get("pid_start") or 0)) < 0.01
        if same:
            os.killpg(run["pid"], signal.SIGKILL)
    except (psutil.Error, ProcessLookupError, PermissionError):
        pass


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

    Uses a fresh home unless --home or RNGDCTL_HOME names one.
    Example: rngdctl demo --no-tui
    """
    from daemon.home import Home
    from daemon.run.spec import validate
    from daemon.scheduling.queueing import free_name
    from rngdctl.export import write_note

    given = home_path or ctx.meta.get("rngdctl.home_given")
    home = Home(given or tempfile.mkdtemp(prefix="rngdctl-demo-")).ensure()
    started = time.monotonic()
    with home.store() as store:
        name = free_name(store, DEMO_RUN["name"])  # demo-2 in a home that had a demo
        config = validate({**DEMO_RUN, "steps": steps, "name": name})
        run_id = store.add_run(config, name=name)
    click.echo(f"home {home.path}: queued run {run_id} ({steps} steps of tiny-llama on cpu, "
               f"interleaved with a {baseline_steps(config)}-step all-offload baseline)")
    with open(home.path / "daemon.log", "ab") as daemon_log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "rngdctl", "--home", str(home.path), "daemon",
             "--launcher", "local", "--tick", "0.5", "--exit-when-idle"],
            stdout=daemon_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            _watch(home, run_id, daemon, use_tui=not no_tui and sys.stdout.isatty())
            daemon.wait(timeout=600)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            _stop(home, run_id, daemon)
            raise click.ClickException("demo interrupted; its run was cancelled") from None
    with home.store() as store:
        run = store.run(run_id)
        note = (write_note(store, [run_id], Path(out) if out else home.path / "experiments")
                if store.step_counts(run_id) else None)  # export refuses a run with no step
    click.echo(f"run {run_id}: {run['status']} in {time.monotonic() - started:.0f} s")
    _echo_model(home, run_id)
    click.echo(f"note: {note}" if note else "note: none (the run stored no step)")
    _echo_saved(home, run_id)
    if run["status"] != "done":
        reason = (run["exit_reason"] or "").splitlines()
        raise click.ClickException(f"the demo run ended {run['status']}"
                                   + (f": {reason[0]}" if reason else ""))
