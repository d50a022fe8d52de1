"""A Helion op's `visible_kernel=`: the kernel without its residuals, which a TPU call that needs
no gradient launches (the eager shortcut's `launch_visible`), as a Pallas op's visible-only
kernel is derived from its body."""

import helion
import helion.language as hl
import pytest
import torch

from tpu_kernels import tpu_kernel
from tpu_kernels.dispatch.eager_device import EagerDeviceCall
from tpu_kernels.errors import OpDefinitionError
from tpu_kernels.kernels.rmsnorm import helion as rms_helion
from tpu_kernels.kernels.rmsnorm import helion_kernel
from tpu_kernels.runtime.sources.helion import ByShape, TorchKernel, _BackendChecked, helion_cpu_mode

ROWS = [helion.Config(block_sizes=[8])]


@helion.kernel(backend="pallas", configs=ROWS)
def _double_with_sum(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, _ = x.size()
    out = torch.empty_like(x)
    total = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, :] * 2
        total[tile_m] = torch.sum(x[tile_m, :].to(torch.float32), dim=-1)
    return out, total


@helion.kernel(backend="pallas", configs=ROWS)
def _double(x: torch.Tensor) -> torch.Tensor:
    m, _ = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, :] * 2
    return out


@helion.kernel(backend="pallas", configs=ROWS)
def _double_renamed(y: torch.Tensor) -> torch.Tensor:
    m, _ = y.size()
    out = torch.empty_like(y)
    for tile_m in hl.tile(m):
        out[tile_m, :] = y[tile_m, :] * 2
    return out


def _interpreted(op, visible_source, n_visible: int) -> _BackendChecked:
    """The op's device kernel as the TPU builds it (`HelionSource.kernels`), on Helion's Pallas
    interpreter for CPU tensors: its full and visible kernels per shape (`ByShape`)."""
    src = op.source
    full = TorchKernel(op.name, op.signature, ByShape(src, "interpret"), "cpu", src)
    visible = TorchKernel(op.name, op.signature, ByShape(visible_source, "interpret"), "cpu", src)
    return _BackendChecked(full, "interpreted", visible, n_visible)


def test_the_tpu_eager_shortcut_launches_rmsnorm_without_its_residual():
    op = rms_helion.rmsnorm_helion
    kernel = op.device_kernel("PrivateUse1")
    inner = getattr(kernel, "kernel", kernel)  # the PaddedKernel's device kernel (rows pad to buckets)
    assert inner.visible_only and inner.visible.kernel.source is op.source.visible
    assert op.source.visible.kernel is helion_kernel.rmsnorm_visible
    call = EagerDeviceCall.for_op(op, "PrivateUse1", "tpu")
    assert call.launch == inner.launch_visible


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [64, 40, 8])  # 32 rows per block where they divide, else 8
def test_rmsnorms_visible_kernel_gives_the_ops_output(rows, dtype):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 256, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(256, generator=g)).to(dtype)
    op = rms_helion.rmsnorm_helion
    kernel = _interpreted(op, op.source.visible, 1)
    with helion_cpu_mode("pallas"):
        want, inv_rms = kernel(x, w, 1e-5)  # the full kernel, at the same shape and config
        got = kernel.launch_visible((x, w, 1e-5), ())
        through_op = op(x, w, 1e-5)  # padded to a bucket where rows need it: another config
    assert isinstance(got, torch.Tensor) and inv_rms.shape == (rows,)
    # the same arithmetic in another program: equal up to the compiler's rounding of it
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got, through_op)


def test_a_visible_kernel_returning_every_output_is_refused_naming_the_op():
    op = tpu_kernel("test_helion_visible::double_sum", outputs=("out", "total"), residuals=("total",),
                    visible_kernel=_double)(_double_with_sum)
    wrong = _interpreted(op, op.source, 1)  # the full kernel in the visible kernel's place
    with helion_cpu_mode("pallas"), pytest.raises(OpDefinitionError, match=r"double_sum.*returned 2.*1 visible"):
        wrong.launch_visible((torch.randn(8, 128),), ())
    x = torch.randn(16, 128)
    with helion_cpu_mode("pallas"):
        torch.testing.assert_close(_interpreted(op, op.source.visible, 1).launch_visible((x,), ()), 2 * x)


def test_visible_kernel_is_checked_where_the_op_is_defined():
    with pytest.raises(OpDefinitionError, match=r"bad_params.*\['y'\].*\['x'\]"):
        tpu_kernel("test_helion_visible::bad_params", outputs=("out", "total"), residuals=("total",),
                   visible_kernel=_double_renamed)(_double_with_sum)
    with pytest.raises(OpDefinitionError, match=r"not_helion.*must be a helion.Kernel.*function"):
        tpu_kernel("test_helion_visible::not_helion", outputs=("out", "total"), residuals=("total",),
                   visible_kernel=lambda x: 2 * x)(_double_with_sum)
    with pytest.raises(OpDefinitionError, match=r"no_residuals.*declares none"):
        tpu_kernel("test_helion_visible::no_residuals", visible_kernel=_double)(_double)


def test_a_jax_op_takes_no_helion_kernel_as_its_visible_kernel():
    def body(x):
        return 2 * x, x.sum(-1)

    with pytest.raises(OpDefinitionError, match=r"jax_visible.*must be a JAX function.*Kernel"):
        tpu_kernel("test_helion_visible::jax_visible", outputs=("out", "total"), residuals=("total",),
                   visible_kernel=_double)(body)
