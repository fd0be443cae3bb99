"""trainer/ownership.py: whose a folder or file is, before rngdctl trusts or writes it.

The attacks that need a second user run as ``nobody`` through setpriv, as another local
user of a shared node would.
"""

import os

import pytest

from tests.conftest import as_nobody, needs_nobody
from trainer import ownership
from trainer.ownership import NotOurs, Owner

# === check_private ===========================================================


def test_a_folder_of_ones_own_without_loose_modes_is_private(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o755)
    assert ownership.check_private(folder, "home").st_uid == os.geteuid()


def test_a_folder_others_may_write_is_refused_with_the_fix(tmp_path):
    folder = tmp_path / "loose"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(NotOurs, match=r"may be written by others \(mode 0777\): chmod go-w"):
        ownership.check_private(folder, "home")


def test_a_group_writable_folder_is_refused_unless_allowed(tmp_path):
    folder = tmp_path / "group"
    folder.mkdir()
    folder.chmod(0o770)
    with pytest.raises(NotOurs, match="its group"):
        ownership.check_private(folder, "home")
    ownership.check_private(folder, "home", allow_group_write=True)


def test_a_symbolic_link_is_not_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(NotOurs, match="symbolic link"):
        ownership.check_private(tmp_path / "link", "home")


@needs_nobody
def test_a_folder_another_user_made_is_refused_naming_them(shared_tmp):
    as_nobody("mkdir", "-m", "700", str(shared_tmp / "theirs"))
    with pytest.raises(NotOurs, match=r"belongs to nobody \(uid 65534\), not to you"):
        ownership.check_private(shared_tmp / "theirs", "home")


# === read_regular ============================================================


def test_a_fifo_is_refused_at_once_rather_than_read(tmp_path):
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    with pytest.raises(NotOurs, match="not a regular file \\(a FIFO\\)"):
        ownership.read_regular(fifo, max_bytes=100)


def test_a_device_is_refused_and_never_read(tmp_path):
    link = tmp_path / "manifest.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(NotOurs, match="symbolic link"):
        ownership.read_regular(link, max_bytes=100)
    with pytest.raises(NotOurs, match="character device"):
        ownership.read_regular("/dev/zero", max_bytes=100)


def test_a_file_past_the_cap_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 101)
    with pytest.raises(NotOurs, match="101 bytes, more than"):
        ownership.read_regular(big, max_bytes=100)
    assert ownership.read_regular(big, max_bytes=101) == b"x" * 101


# === where a run may write ===================================================


@pytest.mark.parametrize("text", ["", "  ", "/", "/etc", "/usr", "/tmp", "~"])
def test_system_folders_the_home_folder_and_an_empty_path_are_never_an_output(text):
    assert ownership.unusable_output(text) is not None


def test_rngdctl_home_and_what_holds_it_are_never_an_output(tmp_path):
    home = tmp_path / "rngd-home"
    assert "holds rngdctl's home" in ownership.unusable_output(str(home), home=home)
    assert "holds rngdctl's home" in ownership.unusable_output(str(tmp_path), home=home)
    assert "a folder of rngdctl's home" in ownership.unusable_output(str(home / "runs"),
                                                                      home=home)
    assert ownership.unusable_output(str(home / "runs" / "3" / "model"), home=home) is None
    assert ownership.unusable_output(str(tmp_path / "elsewhere"), home=home) is None


def test_an_unwritable_place_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is a file" in ownership.writable_ancestor(tmp_path / "file" / "out")
    assert ownership.writable_ancestor(tmp_path / "new" / "deeper") is None


# === the claim ===============================================================

RUN3 = Owner("3", "home-a")


def test_a_new_folder_is_claimed_and_then_only_its_run_may_write_it(tmp_path):
    out = tmp_path / "out"
    assert ownership.check_output(out, RUN3) is False
    ownership.claim(out, RUN3)
    assert ownership.read_owner(out) == RUN3
    assert ownership.check_output(out, RUN3) is True
    with pytest.raises(NotOurs, match="holds the output of run 3 of rngdctl home home-a"):
        ownership.check_output(out, Owner("4", "home-a"))
    with pytest.raises(NotOurs, match="run 3 of rngdctl home home-a"):
        ownership.check_output(out, Owner("3", "home-b"))


def test_a_folder_inside_another_runs_output_is_refused(tmp_path):
    ownership.claim(tmp_path / "out", RUN3)
    with pytest.raises(NotOurs, match="is inside .*/out, the output of run 3"):
        ownership.check_output(tmp_path / "out" / "base" / "x", Owner("4", "home-a"))


def test_a_users_own_nonempty_folder_is_refused_naming_a_file_in_it(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text("{}")
    with pytest.raises(NotOurs, match=r"not empty and no rngdctl run claims it \(config.json"):
        ownership.check_output(out, RUN3)
    assert (out / "config.json").read_text() == "{}"


def test_hand_started_trainers_share_a_folder_only_with_the_same_config(tmp_path):
    out = tmp_path / "out"
    first = Owner(None, None, ownership.config_digest({"steps": 60}))
    ownership.claim(out, first)
    assert ownership.check_output(out, Owner(None, None, ownership.config_digest({"steps": 60})))
    with pytest.raises(NotOurs, match="a trainer started by hand with another config"):
        ownership.check_output(out, Owner(None, None, ownership.config_digest({"steps": 70})))


def test_a_claim_that_is_not_json_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / ownership.CLAIM_NAME).write_text("not json")
    with pytest.raises(NotOurs, match="not rngdctl's"):
        ownership.check_output(out, RUN3)


@needs_nobody
def test_a_folder_another_user_made_for_us_is_refused(shared_tmp):
    as_nobody("mkdir", "-m", "755", str(shared_tmp / "planted"))
    with pytest.raises(NotOurs, match="belongs to nobody"):
        ownership.check_output(shared_tmp / "planted", RUN3)
