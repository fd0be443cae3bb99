"""``trainer check``: cpu agrees with the cpu fp32 reference; a perturbed card does not."""

from __future__ import annotations

from trainer.backends.check import check, run_check


def test_check_passes_cpu_against_cpu(capsys):
    assert run_check("cpu", "tiny-llama", 16, 0, 0, None) == 0
    out = capsys.readouterr().out
    assert "grad layer 3" in out and out.strip().endswith("ok")


def test_check_fails_against_a_perturbed_backend(capsys):
    assert run_check("cpu-perturbed", "tiny-llama", 16, 0, 0, None) == 1
    assert "OVER" in capsys.readouterr().out


def test_check_reports_logits_loss_and_every_layer():
    rows, rtol = check("cpu", "tiny-qwen2", 16, 2, 0)
    names = [r.name for r in rows]
    assert names[:2] == ["logits", "loss"]
    assert [n for n in names if n.startswith("grad layer")] == [f"grad layer {i}" for i in range(4)]
    assert all(r.max_rel <= rtol for r in rows)
