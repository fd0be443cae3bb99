"""deploy/k8s-test's pins for the real tier: one Kubernetes release, one etcd (no Go needed)."""

from __future__ import annotations

import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "k8s-test"
sys.path.insert(0, str(DEPLOY))
import k8s_binaries  # deploy/k8s-test/k8s_binaries.py


def _module_lines(go_mod: Path) -> list[list[str]]:
    """Each requirement or replacement of a go.mod, split into words."""
    lines = []
    for line in go_mod.read_text().splitlines():
        words = line.split("//")[0].removeprefix("require").removeprefix("replace").split()
        if len(words) >= 2 and "." in words[0]:
            lines.append(words)
    return lines


def test_every_staging_module_is_pinned_to_the_release_of_k8s_io_kubernetes():
    release = k8s_binaries.release()
    staging = "v0." + release.split(".", 1)[1]  # v1.37.2 -> v0.37.2
    replaced = [w for w in _module_lines(DEPLOY / "go.mod") if "=>" in w]
    assert len(replaced) > 20
    assert all(w[0] == w[2] and w[3] == staging for w in replaced), replaced
    required = {w[0]: w[1] for w in _module_lines(DEPLOY / "go.mod") if "=>" not in w}
    # k8s.io/kubernetes asks for v0.0.0 (its own folders), the staging modules for each
    # other at the release: the replacement without a version on the left serves both.
    assert {required[w[0]] for w in replaced if w[0] in required} == {"v0.0.0", staging}


def test_etcd_is_one_release_for_the_server_and_the_apiservers_client():
    etcd = {w[0]: w[1] for w in _module_lines(DEPLOY / "go.mod")
            if w[0].startswith("go.etcd.io/etcd/")}
    assert {"go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/client/v3"} <= set(etcd)
    assert len(set(etcd.values())) == 1, etcd


def test_the_binaries_folder_is_named_after_the_pins(tmp_path, monkeypatch):
    before = k8s_binaries.bin_dir()
    pinned = tmp_path / "go.sum"
    pinned.write_bytes((DEPLOY / "go.sum").read_bytes() + b"example.com/x v1.0.0 h1:x=\n")
    monkeypatch.setattr(k8s_binaries, "PINNED_FILES",
                        [pinned if p.name == "go.sum" and p.parent == DEPLOY else p
                         for p in k8s_binaries.PINNED_FILES])
    assert k8s_binaries.bin_dir() != before
    assert k8s_binaries.bin_dir().parent == before.parent
