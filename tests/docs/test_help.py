"""Every command says what it does and shows an example, and every option says what it is
(as sqlite-utils' tests/test_docs.py holds its CLI to): `--help` is the reference."""

from __future__ import annotations

import click
import pytest

from rngdctl.cli import COMMANDS, cli

NAMES = [attr.replace("_", "-") for _, attr in COMMANDS]


def command(name: str) -> click.Command:
    return cli.get_command(click.Context(cli), name)


def test_the_group_lists_every_registered_command_once():
    assert sorted(cli.list_commands(click.Context(cli))) == sorted(set(NAMES))


@pytest.mark.parametrize("name", NAMES)
def test_every_command_has_help_text_and_an_example(name):
    cmd = command(name)
    assert cmd is not None, name
    lines = (cmd.help or "").strip().splitlines()
    assert lines and lines[0].strip(), f"{name} has no help text"
    assert any(line.strip().startswith(f"Example: rngdctl {name}") for line in lines), \
        f"{name}'s help has no 'Example: rngdctl {name} ...' line"


def bare_options(cmd: click.Command) -> list[str]:
    """The options and flags of ``cmd`` that `--help` lists without a word on them."""
    return [p.opts[-1] for p in cmd.params
            if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]


@pytest.mark.parametrize("name", NAMES)
def test_every_option_and_flag_of_every_command_has_help_text(name):
    assert bare_options(command(name)) == [], f"{name}: options without help text"


def test_the_help_check_sees_an_option_without_help():
    @click.command()
    @click.option("--quiet", is_flag=True)
    def stray(quiet):
        """Does nothing.

        Example: rngdctl stray
        """

    assert bare_options(stray) == ["--quiet"]
