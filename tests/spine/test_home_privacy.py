"""The home is the user's (issue 36, item 3): a home, config.toml or rngdctl.db that
another user owns or may write is refused in one line with the fix; a home that others
may read is refused unless it is still empty, when it is made 0700 as a new one is; and
the daemon opens no file under runs/<id>/ through a link.

The attacks of another local user run as ``nobody`` through setpriv (tests/conftest.py).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.conftest import REPO, as_nobody, needs_nobody


def rngdctl_at(home, *args, umask: int | None = None):
    """The CLI on ``home`` in a subprocess: (exit code, stdout, stderr)."""
    argv = [sys.executable, "-m", "rngdctl", "--home", str(home), *args]
    if umask is not None:
        argv = ["sh", "-c", f'umask {umask:03o}; exec "$@"', "sh", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO,
                          check=False)
    return proc.returncode, proc.stdout, proc.stderr


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


SUBMIT = ("submit", "--cards", "1", "--resident", "0")

# === a home rngdctl makes ====================================================


def test_a_home_rngdctl_makes_is_0700_and_its_config_0600_whatever_the_umask(tmp_path):
    home = tmp_path / "new" / "home"

    code, _, err = rngdctl_at(home, *SUBMIT, umask=0)

    assert code == 0, err
    assert (mode(home), mode(home / "config.toml"), mode(home / "rngdctl.db")) == \
        (0o700, 0o600, 0o600)


@needs_nobody
@pytest.mark.parametrize("loose", [0o755, 0o777])
def test_an_empty_folder_of_ones_own_others_may_read_or_write_is_made_a_private_home(
        shared_tmp, loose):
    home = shared_tmp / "mkdired"
    home.mkdir()
    home.chmod(loose)  # `mkdir` under umask 022, a new volume, a kubelet's DirectoryOrCreate

    code, _, err = rngdctl_at(home, *SUBMIT)

    assert code == 0, err
    assert mode(home) == 0o700
    assert as_nobody("ls", str(home), check=False).returncode != 0


# === a home that is not the user's alone ======================================


@needs_nobody
def test_a_world_writable_home_another_user_made_is_refused_and_its_notifier_never_runs(
        shared_tmp):
    home, ran = shared_tmp / "home", shared_tmp / "ran"
    as_nobody("mkdir", "-m", "777", str(home))
    as_nobody("sh", "-c", 'printf "%s" "$1" > "$2"', "sh",
              f'[notify]\ncommand = ["sh", "-c", "id -u > {ran}"]\n', str(home / "config.toml"))

    # What a victim would do: queue a run behind another, cancel that one, run the daemon
    # (which cancels the second run and tells the notifier, as root).
    results = [rngdctl_at(home, *SUBMIT), rngdctl_at(home, *SUBMIT, "--after", "1"),
               rngdctl_at(home, "cancel", "1"), rngdctl_at(home, "daemon", "--exit-when-idle",
                                                            "--tick", "0.1")]

    for code, out, err in results:
        assert (code, out) == (2, "")
        assert err == (f"Error: home {home} belongs to nobody (uid 65534), not to you "
                       f"(root (uid 0)): use a home of your own\n")
    assert not ran.exists()


@needs_nobody
def test_a_home_others_may_read_is_refused_with_the_chmod_that_fixes_it(shared_tmp):
    home = shared_tmp / "home"
    assert rngdctl_at(home, *SUBMIT)[0] == 0
    home.chmod(0o755)
    assert as_nobody("ls", str(home), check=False).returncode == 0  # and read its notes

    code, out, err = rngdctl_at(home, "runs")

    assert (code, out) == (2, "")
    assert err == f"Error: home {home} may be read by others (mode 0755): chmod 700 {home}\n"
    assert mode(home) == 0o755  # a home that holds files keeps the mode its user gave it


def test_a_home_its_group_may_write_is_refused_with_the_fix(tmp_path):
    home = tmp_path / "home"
    assert rngdctl_at(home, *SUBMIT)[0] == 0
    home.chmod(0o770)

    code, _, err = rngdctl_at(home, "runs")

    assert code == 2
    assert err == f"Error: home {home} may be written by its group (mode 0770): chmod go-w {home}\n"


@needs_nobody
@pytest.mark.parametrize("name, what", [("rngdctl.db", "store"),
                                        ("config.toml", "config file")])
def test_a_store_or_config_another_user_planted_is_refused(shared_tmp, name, what):
    home = shared_tmp / "home"
    assert rngdctl_at(home, *SUBMIT)[0] == 0
    planted = shared_tmp / "planted"
    text = "" if name == "rngdctl.db" else "[gates]\nload_max = 1e9\n"  # "" is an empty store
    as_nobody("sh", "-c", 'printf "%s" "$1" > "$2"', "sh", text, str(planted))
    os.replace(planted, home / name)  # it keeps its owner: nobody's file in the home

    code, out, err = rngdctl_at(home, "runs")

    assert (code, out) == (2, "")
    assert err == (f"Error: {what} {home / name} belongs to nobody (uid 65534), not to you "
                   f"(root (uid 0)): use a {what} of your own\n")


# === no file under runs/<id>/ through a link ======================================


@pytest.fixture
def victim(tmp_path):
    """A file of the user's that a link planted in a run's folder points at."""
    path = tmp_path / "victim"
    path.write_text("the user's own file\n")
    path.chmod(0o600)
    return path


@needs_nobody
def test_a_link_another_user_planted_at_a_runs_output_log_is_not_followed(
        home, store, shared_tmp, victim):
    from daemon.errors import LaunchError
    from daemon.launchers.local import OUTPUT_LOG, LocalLauncher
    from daemon.run.ingest import Ingest

    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 5, "backend": "cpu",
                            "model": "tiny-llama", "data": "synthetic", "seq_len": 32,
                            "accum": 1, "lr": 1e-5, "seed": 0})
    link = shared_tmp / "link"
    as_nobody("ln", "-s", str(victim), str(link))
    os.replace(link, home.run_dir(run_id) / OUTPUT_LOG)
    launcher = LocalLauncher(home=home, store=store, config=home.config(),
                             ingest=Ingest(store), python="/bin/echo")

    with pytest.raises(LaunchError, match=r"output.log: a symbolic link, not a log: remove it"):
        launcher.launch(store.run(run_id))

    assert victim.read_text() == "the user's own file\n"


def test_a_runs_log_that_is_a_link_is_not_read_into_the_store(home, store, victim):
    from daemon.errors import LaunchError
    from daemon.launchers.local import OUTPUT_LOG, LocalLauncher
    from daemon.run.ingest import Ingest

    run_id = store.add_run({"cards": 1})
    log = home.run_dir(run_id) / OUTPUT_LOG
    log.symlink_to(victim)
    store.update_run(run_id, status="running", pid=2**22 + 1, log_path=str(log))
    launcher = LocalLauncher(home=home, store=store, config=home.config(),
                             ingest=Ingest(store))

    with pytest.raises(LaunchError, match="a symbolic link, not a log"):
        launcher.follow(store.run(run_id))

    assert store.events(run_id=run_id, kinds=["log"]) == []
    assert store.run(run_id)["log_offset"] in (0, None)


@pytest.mark.parametrize("name", ["output.log", "trainer.lock"])
def test_a_link_at_any_file_the_launch_opens_refuses_the_launch_in_one_line(
        home, store, victim, name):
    from daemon.errors import LaunchError
    from daemon.launchers.local import LocalLauncher
    from daemon.run.ingest import Ingest

    run_id = store.add_run({"cards": 1, "resident": 0, "steps": 5, "backend": "cpu",
                            "model": "tiny-llama", "data": "synthetic", "seq_len": 32,
                            "accum": 1, "lr": 1e-5, "seed": 0})
    (home.run_dir(run_id) / name).symlink_to(victim)
    launcher = LocalLauncher(home=home, store=store, config=home.config(),
                             ingest=Ingest(store), python="/bin/echo")

    with pytest.raises(LaunchError) as err:
        launcher.launch(store.run(run_id))

    assert f"{name}: a symbolic link" in str(err.value) and "\n" not in str(err.value)
    assert victim.read_text() == "the user's own file\n"


def test_the_trainers_log_is_never_written_through_a_link(tmp_path, victim):
    from trainer.errors import UsageError
    from trainer.output.steplog import open_log

    (tmp_path / "steps.jsonl").symlink_to(victim)

    with pytest.raises(UsageError, match=r"^cannot open --log .*steps.jsonl: a symbolic link$"):
        open_log(str(tmp_path / "steps.jsonl"))
    assert victim.read_text() == "the user's own file\n"
