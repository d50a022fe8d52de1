"""Helion kernels with several configs (a preference order: each call runs the first whose
blocks tile its shapes) and `hl.dot` in Helion's eager reference mode on CPU tensors."""

import math

import helion
import helion.language as hl
import jax
import pytest
import torch

from tests.helpers import assert_close, rand
from tests.test_helion_pallas import _bf16_dot
from tpu_kernels import tpu_kernel
from tpu_kernels.errors import InvalidArgumentError
from tpu_kernels.runtime.sources import helion_eager
from tpu_kernels.runtime.sources.helion import helion_cpu_mode

BIG, SMALL = helion.Config(block_sizes=[64]), helion.Config(block_sizes=[8])


@helion.kernel(backend="pallas", configs=[BIG, SMALL])
def _scale_rows(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    m, _ = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        out[tile_m, :] = x[tile_m, :] * scale
    return out


scale_rows = tpu_kernel("test_helion_configs::scale_rows")(_scale_rows)
dot = tpu_kernel("test_helion_configs::dot")(_bf16_dot)  # hl.dot of the input tiles, float32 out


@pytest.mark.parametrize(
    ("rows", "index"),
    [(128, 0), (48, 0), (72, 1)],  # 64 divides 128, 48 fits in one block, 72 needs blocks of 8
)
def test_each_call_runs_the_first_config_that_tiles_its_shapes(rows, index):
    x = rand(rows, 128)
    with helion_cpu_mode("pallas"):
        torch.testing.assert_close(scale_rows(x, 3.0), 3.0 * x)
    source = scale_rows.source
    assert source.config_index([x, 3.0]) == index
    # the TPU's and the lowering check's kernels for that call carry the same config
    for where in ("tpu", "lowering", "interpret"):
        assert source.variants(where, index).at("default").configs == [source.configs[index]]
    # a JAX array of the shape (the lowering check's arguments) chooses the same
    assert source.config_index([jax.ShapeDtypeStruct((rows, 128), "float32"), 3.0]) == index


def test_a_shape_no_config_tiles_is_refused_naming_the_first_configs_block():
    with (
        helion_cpu_mode("pallas"),
        pytest.raises(InvalidArgumentError, match=r"scale_rows.*size 68.*blocks of 64"),
    ):
        scale_rows(rand(68, 128))


def test_the_lowering_check_lowers_each_shape_with_its_config():
    for rows in (128, 72):
        mlir = scale_rows.lower(jax.ShapeDtypeStruct((rows, 128), "bfloat16")).mlir_module()
        assert "tpu_custom_call" in mlir, rows


@pytest.mark.parametrize("mode", ["pallas", "eager"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_hl_dot_into_a_float32_accumulator_runs_in_both_cpu_modes(mode, dtype):
    a, b = rand(256, 384, dtype=dtype), rand(384, 128, dtype=dtype)
    with helion_cpu_mode(mode):
        assert_close(dot(a, b), a.double() @ b.double(), torch.float32, scale=math.sqrt(384))


@pytest.mark.parametrize(
    ("shape_a", "shape_b"), [((16, 32), (32, 8)), ((3, 16, 32), (32, 8)), ((16, 32), (3, 32, 8))], ids=str
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_the_cpu_reference_dot_multiplies_in_the_output_dtype(shape_a, shape_b, dtype):
    def refuses(*args):
        raise AssertionError("CPU floating operands never reach Helion's own reference")

    a, b, acc = rand(*shape_a, dtype=dtype), rand(*shape_b, dtype=dtype), None
    out = helion_eager.cpu_dot(refuses)(a, b, acc, None)
    assert out.dtype == torch.float32
    # products of 16-bit values are exact in float32, and both sides sum in float32
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
    acc = rand(*out.shape)
    torch.testing.assert_close(helion_eager.cpu_dot(refuses)(a, b, acc, None), acc + out)


def test_the_cpu_reference_dot_leaves_integer_operands_to_helion():
    seen = []

    def original(*args):
        seen.append(args)
        return "helion's"

    a = torch.ones(4, 4, dtype=torch.int8)
    assert helion_eager.cpu_dot(original)(a, a, None, None) == "helion's" and len(seen) == 1
    assert helion_eager.out_dtype_of(a, a, None, None) == torch.int32


def test_install_routes_reference_mode_where_torch_lacks_the_cpu_kernel():
    assert helion_eager.install()
    wrapped = getattr(hl.dot._ref_fn, "_tpu_kernels_wrapped", False)
    assert wrapped == (not helion_eager.cpu_has_mm_dtype())


def test_the_tpus_kernel_bakes_statics_in_and_copies_no_scalar_per_call():
    """Helion's Pallas launcher passes a float argument as a one-element device tensor made on
    every call (a host-to-device copy per call on a TPU); the TPU's kernel passes each static as
    `hl.constexpr`: one kernel per value, as tpu_kernels compiles Pallas kernels per static. Run
    here through Helion's own launcher (the TPU's, less torch_tpu) on the interpret variants."""
    from tests.test_helion_pallas import generated
    from tpu_kernels.kernels.helion_ops import add_helion
    from tpu_kernels.runtime.sources.helion import ByShape, constants

    x, y = rand(64, 256), rand(64, 256)
    source = add_helion.source
    kernel = source.variants("interpret", source.config_index([x, y, 0.5])).at("default")
    assert "torch.tensor([alpha]" in generated(kernel, (x, y, 0.5))  # Helion's own way
    assert "torch.tensor(" not in generated(kernel, constants((x, y, 0.5)))
    as_on_tpu = ByShape(source, "interpret")
    for alpha in (0.5, -2.0, 3):
        torch.testing.assert_close(as_on_tpu(x, y, alpha), x + alpha * y)
    assert constants((x, True, 2))[1:] == (hl.constexpr(True), hl.constexpr(2))


def test_the_tpus_kernel_leaves_an_autotuned_kernels_tiles_to_helion(monkeypatch):
    """An op declared with autotune=True runs the config Helion's tuning chooses, so the first
    config's tiling is no reason to refuse its call (the check would read the wrong blocks)."""
    from tpu_kernels.runtime.sources.helion import ByShape

    op = tpu_kernel("test_helion_configs::scale_rows_tuned", autotune=True)(_scale_rows)
    source = op.source
    checked = []
    monkeypatch.setattr(source, "check_tiles", lambda values: checked.append(values))
    ran = []
    monkeypatch.setattr(source, "variants", lambda where, index: lambda *a: ran.append((where, index)))
    ByShape(source, "tpu")(rand(68, 128), 2.0)
    assert checked == [] and ran == [("tpu", 0)]
    monkeypatch.setattr(scale_rows.source, "variants", lambda where, index: lambda *a: ran.append((where, index)))
    monkeypatch.setattr(scale_rows.source, "check_tiles", lambda values: checked.append(values))
    ByShape(scale_rows.source, "tpu")(rand(72, 128), 2.0)
    assert len(checked) == 1 and ran[-1] == ("tpu", 1)
