"""The test control plane's binaries, built from the Go module registry and cached.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl at the one
Kubernetes release that go.mod pins (see its comment), and kwok (kwok/go.mod), which plays
the kubelet of fake nodes. They are built once OUTSIDE the clone, in a folder named after a
hash of the pins (go.mod and go.sum of both modules, the etcd main, the build recipe), and
reused until a pin changes:

    python3 deploy/k8s-test/k8s_binaries.py path    # where the binaries for these pins live
    python3 deploy/k8s-test/k8s_binaries.py build   # build them unless they are already there

The build runs at the lowest CPU priority, ``RNGDCTL_GO_JOBS`` packages at a time (2; ``1``
where memory or other work is short: the binaries are the same), with
the module downloads checked against the committed go.sum (``-mod=readonly``). Its output goes
to ``<bin>.log``. A failed build leaves no folder and writes the reason to ``<bin>.failed``;
tests/k8s/real then skip naming it. Builds of one pin set by several clones at once are
serialised by a lock file beside it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KWOK = HERE / "kwok"
#: (module folder, packages): each `go build` makes the binaries of one module.
PACKAGES = [
    (HERE, ["./etcd", "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kubectl"]),
    (KWOK, ["sigs.k8s.io/kwok/cmd/kwok"]),  # its version is a constant in its source
]
BINARIES = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
            "kwok"]
#: kwok serves pod logs from files that ``Logs`` objects name: the test installs their CRD.
KWOK_LOGS_CRD = "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml"
#: Per `go build`: from empty caches on 2 busy cores kube-apiserver alone takes most of it.
BUILD_TIMEOUT_S = 3 * 3600
PINNED_FILES = [HERE / "go.mod", HERE / "go.sum", HERE / "etcd" / "main.go",
                KWOK / "go.mod", KWOK / "go.sum"]


def release() -> str:
    """The Kubernetes release go.mod requires (``v1.37.2``)."""
    for line in (HERE / "go.mod").read_text().splitlines():
        words = line.removeprefix("require").split()
        if words[:1] == ["k8s.io/kubernetes"]:
            return words[1]
    raise ValueError(f"{HERE / 'go.mod'} requires no k8s.io/kubernetes")


def ldflags(folder: Path) -> str:
    """Stripped binaries; Kubernetes' know their release (else they say v0.0.0-master)."""
    flags = ["-s", "-w"]
    if folder != HERE:
        return " ".join(flags)
    version = release()
    major, minor = version.lstrip("v").split(".")[:2]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.gitVersion={version}", f"-X {package}.gitMajor={major}",
                  f"-X {package}.gitMinor={minor}", f"-X {package}.gitTreeState=clean"]
    return " ".join(flags)


def jobs() -> str:
    """Packages ``go build`` compiles at once: 2 (a fresh CI machine builds in about 10
    minutes at 1), or ``RNGDCTL_GO_JOBS``."""
    return os.environ.get("RNGDCTL_GO_JOBS", "2")


def go_build_command(folder: Path, out: Path, packages: list[str], parallel: str = "1"
                     ) -> list[str]:
    # ``parallel`` changes how long the build takes, not what it builds: the cache key is
    # the command at its default.
    return ["go", "build", "-p", parallel, "-mod=readonly", "-trimpath", "-ldflags",
            ldflags(folder), "-o", f"{out}{os.sep}", *packages]


def bin_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256()
    for path in PINNED_FILES:
        key.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for folder, packages in PACKAGES:
        key.update(repr(go_build_command(folder, Path("OUT"), packages)).encode())
    return cache / "rngdctl" / f"k8s-{key.hexdigest()[:12]}"


def failed_file(where: Path) -> Path:
    return where.with_name(where.name + ".failed")


def log_file(where: Path) -> Path:
    return where.with_name(where.name + ".log")


def why_not_built(where: Path | None = None) -> str | None:
    """None when every binary is there; else why not, in one line."""
    where = where or bin_dir()
    if (where / ".built").exists() and all((where / b).is_file() for b in BINARIES):
        return None
    failed = failed_file(where)
    if failed.exists():
        return f"the Kubernetes binaries could not be built: {failed.read_text().strip()}"
    return (f"the Kubernetes binaries are not built ({where}); `make k8s-binaries` builds "
            f"them from the Go module registry")


def build() -> Path:
    """The binaries' folder once built, else its ``.failed`` file (which says why)."""
    where = bin_dir()
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.with_name(where.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another clone may be building these very pins
        if why_not_built(where) is None:
            return where
        return _build_locked(where)


def _build_locked(where: Path) -> Path:
    failed = failed_file(where)
    if shutil.which("go") is None:
        return _fail(failed, "`go` is not on PATH (Go 1.26 or later builds them)")
    partial = where.with_name(where.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(where, ignore_errors=True)
    partial.mkdir(parents=True)
    figures = []
    with open(log_file(where), "w") as log:
        for folder, packages in PACKAGES:
            started = time.monotonic()
            why = _run(go_build_command(folder, partial, packages, jobs()), folder, log)
            if why:
                shutil.rmtree(partial, ignore_errors=True)
                return _fail(failed, why)
            figures.append(f"{' '.join(packages)}: {time.monotonic() - started:.0f} s")
        crd = _kwok_logs_crd(log)
        if crd is None:
            shutil.rmtree(partial, ignore_errors=True)
            return _fail(failed, f"kwok's module has no {KWOK_LOGS_CRD} (see {log_file(where)})")
        shutil.copyfile(crd, partial / "kwok-logs-crd.yaml")
    sizes = [f"{b}: {(partial / b).stat().st_size / 2**20:.0f} MiB" for b in BINARIES]
    (partial / ".built").write_text("\n".join([f"Kubernetes {release()}", *figures, *sizes])
                                    + "\n")
    os.replace(partial, where)
    failed.unlink(missing_ok=True)
    return where


def _go_env() -> dict[str, str]:
    # -p for what `go build` itself starts too (go list, cgo); the lowest priority comes
    # from the nice value, which every child inherits.
    return {**os.environ, "GOFLAGS": f"-p={jobs()}",
            "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "auto")}


def _run(cmd: list[str], folder: Path, log) -> str | None:
    """Run one go command at the lowest priority; None, or why it failed in one line."""
    log.write(f"$ (cd {folder} && {' '.join(cmd)})\n")
    log.flush()
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=folder, env=_go_env(), stdout=log,
                              stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False,
                              preexec_fn=lambda: os.nice(19))
    except subprocess.TimeoutExpired:
        return f"`{' '.join(cmd[:2])} {cmd[-1]}` ran past {BUILD_TIMEOUT_S} s"
    except OSError as exc:
        return f"`{cmd[0]}` could not start: {exc}"
    log.write(f"# exit {done.returncode} after {time.monotonic() - started:.0f} s\n")
    log.flush()
    if done.returncode == 0:
        return None
    return f"`go build` in {folder.name} exited {done.returncode}: {_last_error(log.name)}"


def _last_error(path: str) -> str:
    lines = [line.strip() for line in Path(path).read_text(errors="replace").splitlines()
             if line.strip() and not line.startswith(("$", "#"))]
    return (lines[-1] if lines else "no output")[:300]


def _kwok_logs_crd(log) -> Path | None:
    try:
        done = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
                              cwd=KWOK, env=_go_env(), capture_output=True, text=True,
                              timeout=300, check=False)
    except (subprocess.TimeoutExpired, OSError) as exc:
        log.write(f"go list -m sigs.k8s.io/kwok: {exc}\n")
        return None
    crd = Path(done.stdout.strip()) / KWOK_LOGS_CRD
    return crd if done.returncode == 0 and crd.is_file() else None


def _fail(failed: Path, reason: str) -> Path:
    failed.write_text(reason + "\n")
    print(f"k8s binaries: not built: {reason}", file=sys.stderr)
    return failed


def main(argv: list[str]) -> int:
    if argv[1:] == ["path"]:
        print(bin_dir())
        return 0
    if argv[1:] == ["build"]:
        where = build()
        print(where)
        return 0 if where.is_dir() else 1
    print("usage: k8s_binaries.py path|build", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
