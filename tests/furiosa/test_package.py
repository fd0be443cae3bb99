"""The trainer's furiosa layer against the real furiosa-torch 2026.4.0 (no card on this host)."""

from __future__ import annotations

import pytest
import torch

from trainer.backends import furiosa_torch, kinds
from trainer.errors import BackendUnavailable, UsageError


def test_the_device_type_is_the_one_the_package_registered():
    import furiosa.torch  # noqa: F401  (registers the PrivateUse1 backend)

    name = torch._C._get_privateuse1_backend_name()
    assert furiosa_torch.device_type() == name == "furiosa"  # 2026.3 renamed it from rngd


def test_cards_are_fused_devices_and_card_n_is_device_n():
    import furiosa.torch as ft

    assert furiosa_torch.card_device(3) == torch.device("furiosa", 3)
    fusion, _mesh, devices = ft.get_device_configuration()
    assert fusion.num_fusion == 8  # all 8 PEs of a card, not the default of one PE a device
    assert len(devices) == 8  # 64 one-PE devices before fusing
    assert furiosa_torch.card_device(0) == torch.device(devices[0])


def test_a_cards_ops_compile_with_the_packages_hierarchical_tactic_population():
    # furiosa-torch's documented compile-time switch: plain mm [32, 64] x [64, 64] compiled in
    # 159 s with the package's defaults here, 13.7 s with it (docs/performance.md). The
    # package's other settings stay as they were.
    from furiosa.torch import config

    before = config.get_compiler_config()
    furiosa_torch.card_device(1)
    after = config.get_compiler_config()
    assert after.hierarchical_tactic_population is True
    assert after.tactic_sorting_policy == before.tactic_sorting_policy
    assert after.enable_tactic_pruning == before.enable_tactic_pruning


def test_a_card_beyond_the_package_device_list_is_bad_input():
    with pytest.raises(UsageError, match=r"addresses cards 0\.\.7"):
        furiosa_torch.card_device(8)


def test_no_driver_is_one_error_naming_the_driver_library_and_prints_nothing(capfd):
    with pytest.raises(furiosa_torch.NoCard) as caught:
        furiosa_torch.probe(2, furiosa_torch.card_device(2))
    message = str(caught.value)
    assert "no RNGD card or driver" in message and "librenegade.so" in message
    assert "/dev/rngd/npu2 does not exist" in message
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # the package's native error lines were captured


def test_the_parser_turns_a_missing_card_into_a_backend_error():
    with pytest.raises(BackendUnavailable, match="backend furiosa:1: no RNGD card or driver"):
        kinds.parse("furiosa:1")


def test_the_compile_backend_is_the_packages_callable_not_a_string():
    import furiosa.torch as ft

    backend = furiosa_torch.compile_backend()
    assert backend is ft.backend and callable(backend) and not isinstance(backend, str)
    assert "furiosa" not in torch._dynamo.list_backends()  # the old string never was one


def test_an_op_the_package_cannot_compile_is_described_in_one_line():
    from furiosa.torch.error import UnsupportedOpError

    line = furiosa_torch.describe_op_failure(UnsupportedOpError("aten::_fused_rms_norm: no rule"))
    assert line.startswith("furiosa-torch 2026.4.0 cannot run an op of the training step")
    assert "aten::_fused_rms_norm" in line and "\n" not in line
    grad = NotImplementedError("duplicated module outputs are not supported for autograd (op x)")
    assert "cannot differentiate" in furiosa_torch.describe_op_failure(grad)
    assert furiosa_torch.describe_op_failure(ValueError("unrelated")) is None


def test_an_op_the_package_cannot_compile_is_named_in_one_line_with_the_packages_reason():
    # What the package's eager path does with an op on a card (run_aten_op): compile it for
    # the card. 2026.4.0 cannot import the embedding's backward into its graph format.
    from furiosa.torch._backend.aten import AtenOp

    furiosa_torch.fuse_cards()
    op = torch.ops.aten.embedding_backward.default
    args = (torch.ones(8, 16), torch.randint(0, 32, (8,)), 32, -1, False, False)
    with pytest.raises(Exception) as caught:
        AtenOp("aten::embedding_backward", op, args, {}).compile()
    line = furiosa_torch.describe_op_failure(caught.value)
    assert line.startswith("furiosa-torch 2026.4.0 cannot run an op of the training step "
                           "(aten::embedding_backward.default): UnsupportedOpError: failed to "
                           "compile (ValueError: failed to import dfg")
    assert "\n" not in line


def test_a_failure_inside_the_packages_gradient_build_is_one_line_too():
    # The package's autograd dispatcher exports softmax with the arguments it was called
    # with; transformers' eager attention passes dtype, which torch.export refuses. This is
    # the build it runs (its own module for softmax), here on CPU tensors as it does.
    from furiosa.torch._custom_ops.autograd_ops import REGISTRATIONS
    from furiosa.torch._module.dfg import DfgModule

    op = torch.ops.aten.softmax.int
    args = (torch.zeros(1, 4, 8, 8), -1, torch.float32)
    with pytest.raises(ValueError) as caught:
        DfgModule.from_module(REGISTRATIONS[op](args, {}), args=args)
    line = furiosa_torch.describe_op_failure(caught.value)
    assert line.startswith("furiosa-torch 2026.4.0 failed on an op of the training step: "
                           "ValueError: Unsupported input type <class 'torch.dtype'>")
    assert "\n" not in line
    assert furiosa_torch.describe_op_failure(ValueError("the trainer's own")) is None
