"""Commit subjects of at most 72 characters, one line each (`make lint`).

Checks the commits since origin/main, or the last 20 where there is no origin/main, and
only those made once this check existed: the commit that added this file and the commits
after it. A commit before it (an ancestor of that commit, or older than it on another line
of history) is not checked, since history is not rewritten (issue 28: 83 % of the earlier
subjects are past 72 characters). Figures and reasons go in the body.

    python .ci/commit_subjects.py [--repo DIR]

Exit 0 when every checked subject fits, 1 naming each that does not, 2 when git fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIMIT = 72
LAST = 20
THIS = ".ci/commit_subjects.py"  # the rule starts with the commit that added this file


class GitError(Exception):
    """git could not answer (not a repository, no commits, a timeout)."""


def git(repo: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git {' '.join(args)}: {exc}") from None
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def has_ref(repo: Path, ref: str) -> bool:
    try:
        git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GitError:
        return False
    return True


def rule_start(repo: Path) -> tuple[str, int] | None:
    """The commit that added this check, and its committer time; None before it is committed."""
    added = git(repo, "log", "--diff-filter=A", "--format=%H %ct", "HEAD", "--", THIS).split()
    if not added:
        return None
    return added[-2], int(added[-1])  # the earliest add: git log lists newest first


def checked(repo: Path) -> tuple[str, list[tuple[str, str]]]:
    """What was checked (in words), and (hash, subject) of every commit the rule covers."""
    since = "origin/main" if has_ref(repo, "origin/main") else None
    scope = ["origin/main..HEAD"] if since else [f"--max-count={LAST}", "HEAD"]
    what = "the commits since origin/main" if since else f"the last {LAST} commits"
    start = rule_start(repo)
    if start is None:
        return f"{what}, none of them after the check began: {THIS} is not committed", []
    first, first_time = start
    # %s is the subject: git joins a first paragraph of several lines into one, so a
    # subject spread over two lines is as long as both.
    log = git(repo, "log", "--format=%H%x09%ct%x09%s", *scope, f"^{first}^@", "--")
    commits = [line.split("\t", 2) for line in log.splitlines() if line]
    kept = [(h, subject) for h, when, subject in commits if int(when) >= first_time]
    return f"{what}, from {first[:12]} (where this check began)", kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path.cwd())
    args = parser.parse_args()
    try:
        what, commits = checked(args.repo)
    except GitError as exc:
        print(f"Error: commit subjects: {exc}", file=sys.stderr)
        return 2
    long = [(h, s) for h, s in commits if len(s) > LIMIT]
    for h, s in long:
        print(f"{h[:12]}: subject of {len(s)} characters (at most {LIMIT}; detail goes in the "
              f"body): {s[:80]}{'...' if len(s) > 80 else ''}", file=sys.stderr)
    print(f"commit subjects: {len(commits)} checked ({what}), {len(long)} past {LIMIT} "
          "characters")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
