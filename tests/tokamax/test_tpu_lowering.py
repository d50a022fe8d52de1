"""The TPU kernels (Tokamax's Mosaic implementations) lower for a TPU on this CPU machine.

Tokamax refuses its TPU kernels off-TPU unless told which chip to compile for: an
abstract mesh names the TPU generation, and `tokamax.config.cross_compile` skips its
device checks. `op.lower(platform="tpu")` then runs the Pallas -> Mosaic lowering of
the op's body, forward or backward, as torch_tpu would export it on a TPU host.
Errors only the TPU compiler raises are not caught here.
"""

import contextlib

import jax
import jax.numpy as jnp
import pytest
import tokamax

from tpu_kernels.testing import assert_lowers_for_tpu
from tpu_kernels.tokamax import attention, gather, kda, loss, ragged, rope, topk
from tpu_kernels.tokamax.registry import all_ops

S, BF16, I32, F32 = jax.ShapeDtypeStruct, jnp.bfloat16, jnp.int32, jnp.float32
# Tokamax's SparseCore kernels use APIs JAX now warns about; not ours to fix.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Destination semaphore is ignored"),
    pytest.mark.filterwarnings("ignore:plsc.bitcast is deprecated"),
]


@contextlib.contextmanager
def compiling_for(device_kind: str = "TPU v6 lite"):
    device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=1, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh), tokamax.config.cross_compile(True):
        yield


QKV = [S((1, 512, 4, 128), BF16)] * 3


def lowers_for_tpu(op, *args, **kwargs):
    """One call lowers for the chip `compiling_for` targets, with a Mosaic kernel."""
    assert_lowers_for_tpu(op, call=(args, kwargs), chip_name=None)


@pytest.mark.parametrize("op", all_ops(), ids=lambda op: op.short_name)
def test_every_op_lowers_at_its_tpu_examples(op):
    # Each family's examples, built for the chip as `tpu-kernels check` builds them: where
    # the TPU order starts with a Mosaic kernel, that kernel (not XLA) is what lowers.
    with compiling_for():
        for args, kwargs in op.examples():
            mlir = op.lower(*args, **kwargs).mlir_module()
            mosaic = kwargs["implementation"].startswith("mosaic")
            assert ("tpu_custom_call" in mlir) == mosaic, (op.name, kwargs["implementation"])


@pytest.mark.parametrize("device_kind", ["TPU v5 lite", "TPU v6 lite"])
def test_flash_attention_forward_and_backward(device_kind):
    with compiling_for(device_kind):
        lowers_for_tpu(attention.dot_product_attention_op, *QKV, is_causal=True, implementation="mosaic_tpu")
        backward = attention.dot_product_attention_op.backward_op
        lowers_for_tpu(backward, QKV[0], *QKV, is_causal=True, implementation="mosaic_tpu")


def test_ragged_dot_and_fused_loss():
    with compiling_for():
        lowers_for_tpu(
            ragged.ragged_dot_op,
            S((512, 256), BF16),
            S((4, 256, 512), BF16),
            S((4,), I32),
            implementation="mosaic_tpu",
        )
        x, labels, w = S((512, 256), BF16), S((512,), I32), S((256, 2048), BF16)
        lowers_for_tpu(loss.linear_softmax_cross_entropy_loss_op, x, labels, w, implementation="mosaic_tpu")
        lowers_for_tpu(
            loss.linear_softmax_cross_entropy_loss_op.backward_op,
            S((), F32),  # the one gradient (one Tensor per returned output)
            x,
            labels,
            w,
            implementation="mosaic_tpu",
        )


def test_tokamax_ops_kernels():
    with compiling_for("TPU7x"):  # these run on the SparseCore of TPU v7 and later
        lowers_for_tpu(topk.top_k_op, S((8, 1024), F32), None, k=16, implementation="mosaic_tpu")
        rows, idx = S((1024, 256), BF16), S((512,), I32)
        lowers_for_tpu(
            gather.ragged_gather_op, rows, idx, S((1,), I32), S((1,), I32), implementation="mosaic"
        )
        # Inputs that fit in VMEM take Tokamax's XLA path even here: give it a real MoE size.
        expert_rows, routes = S((16384, 4096), BF16), S((8192,), I32)
        weights, valid = S((8192,), F32), S((8192,), jnp.bool_)
        lowers_for_tpu(
            gather.ragged_gather_reduce_op,
            expert_rows,
            routes,
            weights,
            valid,
            reduce_group_size=8,
            implementation="mosaic_tpu",
        )
    with compiling_for():
        lowers_for_tpu(topk.router_topk_op, S((512, 64), F32), k=8, implementation="mosaic_tpu")
        lowers_for_tpu(
            rope.deepseek_rope_op,
            S((64, 4, 128), BF16),
            S((64,), I32),
            S((128, 64), F32),
            implementation="mosaic_tpu",
        )


def test_kimi_delta_attention_kernel():
    with compiling_for():
        lowers_for_tpu(
            kda.kimi_delta_attention_op,
            *[S((2, 1, 256, 128), BF16)] * 4,
            S((2, 1, 256), BF16),
            implementation="mosaic",
        )


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["v6e", "7x"])
def test_tpu_kernels_check_lowers_every_tokamax_op_and_its_backward(chip, capsys):
    """`tpu-kernels check tpu_kernels.tokamax`: each op at its TPU examples (Tokamax's TPU
    implementation order), forward and backward; on 7x the SparseCore kernels too."""
    from tpu_kernels.cli import main

    assert main(["check", "tpu_kernels.tokamax", "--chip", chip]) == 0
    out = capsys.readouterr().out
    assert "0 failed, 0 skipped" in out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("ok ")}
    # Mosaic kernels, not a fallback to XLA, where Tokamax has them for this chip
    for name in ("dot_product_attention", "dot_product_attention_backward", "ragged_dot", "mhc_pre"):
        assert "plain XLA" not in lines[f"tokamax::{name}"], lines[f"tokamax::{name}"]
    sparsecore = lines["tokamax::top_k"]
    assert ("plain XLA" in sparsecore) == (chip == "v6e"), sparsecore


def test_backward_of_a_kernel_without_vjp_differentiates_the_rest_of_the_order():
    from tpu_kernels.tokamax.wrap import differentiable_order

    assert differentiable_order("mosaic_tpu,xla", ("mosaic_tpu",)) == "xla"
    assert differentiable_order("mosaic_tpu", ("mosaic_tpu",)) == "xla"
    assert differentiable_order(None, ("mosaic",)) == "xla"
    assert differentiable_order("xla_chunked,xla", ("mosaic",)) == "xla_chunked,xla"
    with compiling_for():  # the Mosaic forward has no VJP; its backward op still lowers
        backward = rope.deepseek_rope_op.backward_op
        x, pos, cache = S((64, 4, 128), BF16), S((64,), I32), S((128, 64), F32)
        assert (
            "tpu_custom_call"
            in rope.deepseek_rope_op.lower(x, pos, cache, implementation="mosaic_tpu").mlir_module()
        )
        backward.lower(x, x, pos, cache, implementation="mosaic_tpu")
