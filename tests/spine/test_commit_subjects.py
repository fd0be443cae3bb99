"""`make lint`'s commit-subject check (.ci/commit_subjects.py) on real git repositories."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

CHECK = REPO / ".ci" / "commit_subjects.py"
LONG = ("stepmodel: " + "a subject that says everything the body should say " * 2).rstrip()

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="no git on this host")


@pytest.fixture
def repo(tmp_path):
    """An empty repository, and a function that commits with a subject (and a body)."""
    path = tmp_path / "repo"
    path.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    counter = iter(range(1_000_000))

    def git(*args):
        return subprocess.run(["git", *args], cwd=path, env=env, check=True, timeout=30,
                              capture_output=True, text=True).stdout

    def commit(message, *, add_check=False):
        n = next(counter)
        (path / f"file{n}").write_text(str(n))
        if add_check:
            (path / ".ci").mkdir(exist_ok=True)
            shutil.copy(CHECK, path / ".ci" / "commit_subjects.py")
        git("add", "-A")
        git("commit", "-q", "-m", message)
        return git("rev-parse", "HEAD").strip()

    git("init", "-q", "-b", "main")
    commit.git = git
    commit.path = path
    return commit


def check(repo):
    proc = subprocess.run([sys.executable, str(repo.path / ".ci" / "commit_subjects.py"),
                           "--repo", str(repo.path)], capture_output=True, text=True,
                          timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_subject_past_72_characters_fails_lint_and_is_named(repo):
    repo(LONG)  # before the rule: left alone
    repo("ci: check commit subjects", add_check=True)
    late = repo(LONG + "\n\nThe body may be as long as it likes.")

    code, out, err = check(repo)

    assert code == 1
    named = (f"{late[:12]}: subject of {len(LONG)} characters (at most 72; detail goes in the "
             f"body): {LONG[:80]}...")
    assert err.splitlines() == [named]
    assert out.startswith("commit subjects: 2 checked (the last 20 commits, from ")


def test_commits_made_before_the_check_existed_are_not_checked(repo):
    for _ in range(3):
        repo(LONG)
    repo("ci: check commit subjects", add_check=True)
    repo("docs: a subject of exactly seventy-two characters, not one more, okay.")

    code, out, err = check(repo)

    assert (code, err) == (0, "")
    assert "2 checked" in out and "0 past 72 characters" in out


def test_a_subject_on_two_lines_counts_as_one_long_subject(repo):
    repo("ci: check commit subjects", add_check=True)
    repo("docs: a first line of forty characters\nthen a second line without a blank one")

    code, _, err = check(repo)

    assert code == 1 and "subject of 77 characters" in err


def test_with_origin_main_only_the_commits_since_it_are_checked(repo):
    repo("ci: check commit subjects", add_check=True)
    landed = repo(LONG)  # landed on main before this branch: origin/main's business
    repo.git("update-ref", "refs/remotes/origin/main", landed)
    repo("docs: this branch's own commit")

    code, out, _ = check(repo)

    assert code == 0
    assert "1 checked (the commits since origin/main" in out
