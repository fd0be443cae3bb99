"""The click entry point: shared options, command registration, error conversion.

Commands are thin: parse, call one library function, format the result. Every
``RngdctlError`` becomes one line on stderr and its exit code; the command
modules import heavy libraries inside their functions, so ``submit``, ``runs``
and ``show`` start fast.
"""

from __future__ import annotations

import importlib
import sys

import click

from daemon.errors import RngdctlError

#: (module, attribute) of each registered command, in help order.
COMMANDS = [
    ("rngdctl.commands.runs", "submit"),
    ("rngdctl.commands.runs", "runs"),
    ("rngdctl.commands.runs", "show"),
    ("rngdctl.commands.runs", "cancel"),
    ("rngdctl.commands.runs", "hold"),
    ("rngdctl.commands.runs", "release"),
    ("rngdctl.commands.runs", "move"),
    ("rngdctl.commands.daemon", "daemon"),
    ("rngdctl.commands.daemon", "gates"),
    ("rngdctl.commands.holders", "holders"),
    ("rngdctl.commands.cards", "cards"),
    ("rngdctl.commands.events", "events"),
    ("rngdctl.commands.agent", "agent"),
    ("rngdctl.commands.doctor", "doctor"),
    ("rngdctl.commands.export", "export"),
    ("rngdctl.commands.demo", "demo"),
    ("rngdctl.commands.tui", "tui"),
    ("rngdctl.commands.model", "model"),
    ("rngdctl.commands.plan", "plan"),
    ("rngdctl.commands.edit", "edit"),
    ("rngdctl.commands.edit", "clone"),
    ("rngdctl.commands.edit", "restart"),
    ("rngdctl.commands.edit", "resume"),
    ("rngdctl.commands.wait", "wait"),
    ("rngdctl.commands.diff", "diff"),
]


class LazyGroup(click.Group):
    """Imports a command's module only when that command runs or help is shown."""

    def list_commands(self, ctx):
        return [attr.replace("_", "-") for _, attr in COMMANDS]

    def get_command(self, ctx, name):
        for module, attr in COMMANDS:
            if attr.replace("_", "-") == name:
                return getattr(importlib.import_module(module), attr)
        return None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", type=click.Path(file_okay=False), envvar="RNGDCTL_HOME",
              help="State folder (default: $RNGDCTL_HOME, else the user data folder).")
@click.version_option(package_name="rngdctl")
@click.pass_context
def cli(ctx, home):
    """Queue, gate, launch, follow and write up fine-tuning runs on shared RNGD nodes."""
    from daemon.home import Home

    ctx.obj = Home(home)
    ctx.meta["rngdctl.home_given"] = home  # None when neither --home nor RNGDCTL_HOME


def main(argv=None):
    try:
        # standalone_mode=False hands back ctx.exit(N)'s N (``gates`` exits 1 when blocked).
        code = cli.main(args=argv, prog_name="rngdctl", standalone_mode=False)
    except RngdctlError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        click.echo(usage_line(exc), err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        if not _store_error(exc):
            raise
        # The store was fine when opened but failed later (locked too long, disk full).
        click.echo(f"Error: the store failed: {exc}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)


def _store_error(exc: Exception) -> bool:
    """Whether ``exc`` is sqlite3's. Looked up, not imported: a command that never opened
    the store (``cards``) has not loaded sqlite3, and cannot have raised its error."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(exc, sqlite3.Error)


def usage_line(exc: click.ClickException) -> str:
    """Click's error as ONE line: the message, and where the usage is.

    Click prints the usage, a hint and the message on three lines; scripts and
    people read the first line of stderr, so it must say what was wrong.
    """
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        return f"Error: {message} (see '{ctx.command_path} --help')"
    return f"Error: {message}"
