"""On a GPU device target: which implementation each optimizer runs and which library its
native ops call.  MindSpore's GPU build cannot run here, so the device target is patched and
the optimizers' ops are built, not run; the CUDA kernels themselves are tested on a GPU
(tests/gpu)."""
import logging

import pytest

import mindspore as ms
from mindspore import context, nn

import ms_optim
from ms_optim import _cuda
from ms_optim.clip import ClipGradByGlobalNorm
from ms_optim.dgc.steps import NativeStep
from tests.optim_db import DGC_BASE

needs_library = pytest.mark.skipif(not _cuda.available(),
                                   reason="the CUDA library is not built (no nvcc at install)")


@pytest.fixture
def gpu_target(monkeypatch):
    real = context.get_context
    monkeypatch.setattr(context, "get_context",
                        lambda key: "GPU" if key == "device_target" else real(key))


@pytest.fixture
def no_cuda_library(monkeypatch, tmp_path):
    """The install found no nvcc: the CUDA library is missing."""
    monkeypatch.setattr(_cuda, "library_path", lambda: str(tmp_path / _cuda.LIB_NAME))
    monkeypatch.setattr(_cuda._LIBRARY, "handle", None)


def _cuda_entry(op, entry):
    """The op calls `entry` of the CUDA library, registered for the GPU."""
    assert op.func == f"{_cuda.library_path()}:{entry}"
    assert op.primitive_target == "GPU" and op.reg_info["target"] == "GPU"


def _net():
    return nn.SequentialCell([nn.Dense(128, 256), nn.ReLU(), nn.Dense(256, 10)])


@needs_library
@pytest.mark.parametrize("impl", ["auto", "native"])
def test_lamb_runs_the_cuda_kernels(gpu_target, impl):
    opt = ms_optim.Lamb(_net().trainable_params(), learning_rate=1e-3, impl=impl,
                        grad_clip=ClipGradByGlobalNorm(1.0))
    assert (opt.impl, opt.kernel_device) == ("native", "GPU")
    for op in opt.lamb_ops:
        _cuda_entry(op, "ms_optim_lamb")
    for op in opt.sumsq_ops:
        _cuda_entry(op, "ms_optim_sumsq")


@needs_library
@pytest.mark.parametrize("exchange", ["auto", "union"])
def test_dgc_runs_the_cuda_kernels_for_the_compressed_parameters(gpu_target, exchange):
    opt = ms_optim.DGCMomentum(_net().trainable_params(), **dict(DGC_BASE, exchange=exchange),
                               bucket_sparsity=0.9)
    assert (opt.impl, opt.kernel_device) == ("native", "GPU")
    step = opt.sparse_step
    assert isinstance(step, NativeStep)
    for stage_ops in step.select_ops:
        for op in stage_ops:
            _cuda_entry(op, "ms_optim_dgc_select_multi")
    for op in step.apply_ops:
        _cuda_entry(op, "ms_optim_dgc_apply_multi")
    if step.shares:
        for op in step.take_ops:
            _cuda_entry(op, "ms_optim_dgc_take_multi")
        for stage_ops in step.propose_ops:
            for op in stage_ops:
                _cuda_entry(op, "ms_optim_dgc_propose_multi")
    assert step.shares == (exchange == "union")
    # the bucket of small parameters and the dense momentum (also of every parameter before
    # compression): graph code, no native op
    assert not opt.bucket_step.native
    warm = ms_optim.DGCMomentum(_net().trainable_params(),
                                **dict(DGC_BASE, exchange=exchange, rampup_begin_step=2),
                                bucket_sparsity=0.9)
    for momentum in (opt.dense_momentum, warm.all_momentum):
        assert momentum.run_ops == ()


def test_adam_offload_keeps_its_moments_on_the_host(gpu_target):
    opt = ms_optim.AdamOffload(_net().trainable_params(), learning_rate=1e-3)
    assert opt.impl == "delta"


@pytest.mark.parametrize("impl", ["auto", "native"])
def test_without_the_cuda_library_the_ops_path_runs(gpu_target, no_cuda_library, caplog, impl):
    caplog.set_level(logging.WARNING, logger="ms_optim")
    lamb = ms_optim.Lamb(_net().trainable_params(), learning_rate=1e-3, impl=impl)
    assert (lamb.impl, lamb.kernel_device) == ("ops", "CPU")
    dgc = ms_optim.DGCMomentum(_net().trainable_params(), **DGC_BASE, impl=impl)
    assert dgc.impl == "ops"
    assert len(caplog.records) == 2  # one line per optimizer built
    for record, name in zip(caplog.records, ("Lamb", "DGCMomentum")):
        assert name in record.getMessage()
        assert f"{_cuda.LIB_NAME} is missing" in record.getMessage()
        assert "running impl='ops'" in record.getMessage()


def test_on_cpu_the_host_kernels_run():
    assert context.get_context("device_target") == "CPU"
    opt = ms_optim.Lamb(_net().trainable_params(), learning_rate=1e-3)
    assert (opt.impl, opt.kernel_device) == ("native", "CPU")
    assert opt.lamb_ops[0].func.endswith("libms_optim.so:ms_optim_lamb")
    assert ms.get_context("device_target") == "CPU"
