"""runtime/sources/helion_pallas.py: the Pallas code Helion generates for a TPU, held on the CPU.

Two failures of the TPU suite on a v5e (bench/reports/tpu_suite_v5e.json), both in the code
Helion 1.5.1 generates and neither visible on the CPU path (`Kernel.jax_fn`: the CPU computes
float32 dots in float32 at any precision, and that launcher never substitutes a dot for a
small matmul):

- `matmul_helion` in float32 under torch's "highest" was 0.25 off on values of about 30 at
  K=512: Helion writes `precision='default'` (one bf16 pass) on every dot;
- the matmul template's Helion op returned a [256, 256] tensor for (128, 256) @ (256, 128), its
  extra entries zero: Helion's launcher ran its no-tiling `lax.dot_general` on the inputs it had
  zero-padded to whole blocks of 256.

Here: the code generated per torch setting, the Mosaic contract precision of its TPU lowering,
and the TPU's dispatch kernel run on CPU tensors in interpret mode: the same Helion launcher
(`default_pallas_launcher`), whose TPU launch adds torch_tpu's `JaxCallable` only.
"""

from __future__ import annotations

import importlib
import re
import sys

import helion
import helion.language as hl
import jax
import pytest
import torch

from tpu_kernels import scaffold
from tpu_kernels.kernels.helion_ops import matmul_helion
from tpu_kernels.lowering.export import lowering_for_tpu, mosaic_modules
from tpu_kernels.runtime.mosaic_precision import traced_at
from tpu_kernels.runtime.sources import helion_pallas
from tpu_kernels.runtime.sources.helion import TorchKernel
from tpu_kernels.testing import assert_close, dot_scale, rand

S = jax.ShapeDtypeStruct
# torch setting -> the precision=... Helion's code says (Mosaic compiles no HIGH)
WRITTEN = {"highest": "highest", "high": "highest", "medium": "default"}


@pytest.fixture(autouse=True)
def restore_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def tpu_kernel_in_interpret_mode(op):
    """The TPU's dispatch kernel for a Helion op (sources/helion.py), over the interpret-mode
    variants: on CPU tensors, Helion's own launcher, as on a TPU less torch_tpu."""
    return TorchKernel(op.name, op.signature, op.source.interpret_variants, "cpu", op.source)


def generated(kernel, args) -> str:
    bound = kernel.bind(args)
    return bound.to_triton_code(kernel.configs[0] if kernel.configs else bound.config_spec.default_config())


def written_precisions(code: str) -> set[str]:
    return set(re.findall(r"dot_general\([^\n]*precision='(\w+)'", code))


def mosaic_contract_precisions(text: str) -> set[str]:
    lines = [line for m in mosaic_modules(text) for line in m.splitlines() if "tpu.matmul" in line]
    assert lines, "the lowering holds no Mosaic matmul"
    return {(re.search(r"contract_precision<(\w+)>", line) or [None, "DEFAULT"])[1] for line in lines}


def test_jax_names_map_to_the_two_precisions_mosaic_compiles():
    name = helion_pallas.helion_dot_precision
    assert {n: name(n) for n in (None, "default", "bfloat16", "fastest")} == dict.fromkeys(
        (None, "default", "bfloat16", "fastest"), "default"
    )
    assert {
        n: name(n) for n in ("high", "tensorfloat32", "highest", "float32", "BF16_BF16_F32_X3")
    } == dict.fromkeys(("high", "tensorfloat32", "highest", "float32", "BF16_BF16_F32_X3"), "highest")


def test_helions_backend_writes_highest_where_it_is_asked_for_and_its_own_choice_elsewhere():
    from helion._compiler.pallas.backend import PallasBackend

    assert helion_pallas.install()
    assert PallasBackend.map_dot_precision("highest") == PallasBackend.map_dot_precision("ieee") == "highest"
    for setting in ("default", "high", "tf32", "tf32x3"):  # as Helion 1.5 writes them
        assert PallasBackend.map_dot_precision(setting) == "default"


@pytest.mark.parametrize("order", [("medium", "highest", "high", "medium"), ("highest", "medium", "highest")])
def test_each_setting_runs_its_own_kernel_generated_at_its_precision(order):
    """torch_tpu's JaxCallable traces once per shape and knows nothing of precision: a kernel
    generated at one precision must not serve another, in either order."""
    variants = matmul_helion.source.device_variants["tpu"]
    a, b = rand(256, 512), rand(512, 256)
    seen = {}
    for setting in order:
        torch.set_float32_matmul_precision(setting)
        kernel = variants.current()
        assert written_precisions(generated(kernel, (a, b))) == {WRITTEN[setting]}, setting
        assert seen.setdefault(WRITTEN[setting], kernel) is kernel  # one kernel per precision
    assert len({id(k) for k in seen.values()}) == len(seen)


@pytest.mark.parametrize("name", ["highest", "high", "default"])
def test_the_tpu_lowering_asks_mosaic_for_the_precision(name):
    """What the chip compiles: contract_precision<fp32> (HIGHEST) where full float32 was asked
    for, none (one bf16 pass) at "default". The kernel casts its tiles to float32 before the dot,
    so bf16 inputs take HIGHEST too."""
    body = matmul_helion.source.lowering_body

    def f(a, b):
        with traced_at(name):
            return body(a=a, b=b)

    want = {"default": "DEFAULT"}.get(name, "fp32")
    for dtype in ("float32", "bfloat16"):
        with lowering_for_tpu():
            text = jax.export.export(jax.jit(f), platforms=["tpu"])(
                S((256, 512), dtype), S((512, 256), dtype)
            )
        assert mosaic_contract_precisions(text.mlir_module()) == {want}, dtype


@helion.kernel(backend="pallas", config=helion.Config(block_sizes=[128, 128, 128]))
def _bf16_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.size()
    _, n = b.size()
    out = torch.empty([m, n], dtype=torch.float32, device=a.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = hl.dot(a[tile_m, tile_k], b[tile_k, tile_n], acc=acc)
        out[tile_m, tile_n] = acc
    return out


def test_a_bf16_dot_at_highest_asks_mosaic_for_no_float32_contraction():
    """A dot of bf16 operands is exact in one pass, and Mosaic refuses a float32 contraction for
    one ("Bad lhs type"): Mosaic's dot lowering is wrapped with Helion's backend."""
    from tpu_kernels import tpu_kernel

    op = tpu_kernel("test_helion_pallas::bf16_dot")(_bf16_dot)
    kernel = op.source.tpu_variant.at("highest")
    assert written_precisions(generated(kernel, (rand(256, 256).bfloat16(), rand(256, 256).bfloat16()))) == {
        "highest"
    }
    spec = S((256, 256), "bfloat16")
    with lowering_for_tpu():
        text = jax.export.export(jax.jit(kernel.jax_fn), platforms=["tpu"])(spec, spec).mlir_module()
    assert mosaic_contract_precisions(text) == {"DEFAULT"}


def test_the_no_tiling_substitution_is_kept_only_where_it_computes_the_kernels_result():
    keep = helion_pallas.keep_matmul_dot_general
    assert keep([(128, 128)] * 3, [128, 128, 128], "default")
    assert not keep([(128, 256), (256, 128), (128, 128)], [256, 256, 256], "default")  # padded
    assert not keep([(128, 128)] * 3, [256, 256, 256], "default")  # padded
    assert not keep([(128, 128)] * 3, [128, 128, 128], "highest")  # its dot says "default"
    source = matmul_helion.source  # its config of 128-blocks: equal to a 128-square call's sizes
    variants = source.variants("interpret", [list(c.block_sizes) for c in source.configs].index([128, 128, 128]))
    square, small = (rand(128, 128), rand(128, 128)), (rand(64, 256), rand(256, 64))
    assert "_matmul_dot_general=" in generated(variants.at("default"), square)
    assert "_matmul_dot_general=" not in generated(variants.at("highest"), square)
    assert "_matmul_dot_general=" not in generated(variants.at("default"), small)


MATMUL_SHAPES = [(256, 512, 256), (128, 128, 128), (64, 256, 64), (100, 72, 40)]


@pytest.mark.parametrize("setting", ["highest", "medium"])
@pytest.mark.parametrize("m, k, n", MATMUL_SHAPES, ids=str)
def test_the_shipped_matmul_through_the_tpus_launcher_gives_the_calls_result(setting, m, k, n):
    torch.set_float32_matmul_precision(setting)
    a, b = rand(m, k), rand(k, n)
    out = tpu_kernel_in_interpret_mode(matmul_helion)(a, b)
    assert out.shape == (m, n)
    assert_close(out, a.double() @ b.double(), torch.float32, scale=dot_scale(k, torch.float32))


@pytest.fixture(scope="module")
def template_op(tmp_path_factory):
    dest = tmp_path_factory.mktemp("helion_matmul_template")
    scaffold.new("hmm", "matmul", backend="helion", dest=dest, namespace="tpl_hmm")
    sys.path.insert(0, str(dest))
    try:
        package = importlib.import_module("hmm")
        yield package.hmm, importlib.import_module("hmm.shapes")
    finally:
        sys.path.remove(str(dest))


def test_the_matmul_templates_helion_op_through_the_tpus_launcher_gives_every_test_shape(template_op):
    """The TPU suite's template test calls (128, 256) @ (256, 128), smaller than a 256-block in M
    and N: the launcher's substitution returned the zero-padded [256, 256] product."""
    op, shapes = template_op
    torch.set_float32_matmul_precision("highest")
    kernel = tpu_kernel_in_interpret_mode(op)
    for name, (m, k, n) in shapes.TEST.items():
        a, b = rand(m, k), rand(k, n)
        out = kernel(a, b)
        assert out.shape == (m, n), name
        assert_close(
            out, a.double() @ b.double(), torch.float32, scale=dot_scale(k, torch.float32), what=name
        )


@pytest.fixture
def torch_tpu_launch(monkeypatch):
    """Helion's TPU launch itself on the CPU, as far as it goes without a chip: its launcher
    builds torch_tpu's `JaxCallable`, which exports the kernel for the TPU (`jax.export`,
    platforms=["tpu"]) and registers it; allocating the outputs on the "tpu" device is where it
    stops here. Helion reads the chip from torch_tpu (a v5e here), and each export is kept, so
    `launch(kernel, *tensors)` returns what the chip would compile for the call."""
    pytest.importorskip("torch_tpu")
    from torch_tpu._internal.pallas import pallas as torch_tpu_pallas
    from torch_tpu._internal.utils import hardware

    monkeypatch.setattr(hardware, "get_tpu_device_name", lambda *args, **kwargs: "TPU v5 lite")
    exported = []
    export = jax.export.export

    def keeping(fn, *args, **kwargs):
        lower = export(fn, *args, **kwargs)

        def call(*a, **k):
            exported.append(lower(*a, **k))
            return exported[-1]

        return call

    class OnTheChipNow(Exception):
        pass

    def placeholder(aval, **kwargs):
        raise OnTheChipNow

    monkeypatch.setattr(jax.export, "export", keeping)
    monkeypatch.setattr(torch_tpu_pallas, "torch_placeholder", placeholder)
    # Helion registers the chip's TPU info as the CPU's for the export, in this registry where
    # JAX has it (helion/runtime/pallas/launcher.py, _ensure_cpu_tpu_info): restored after
    try:
        from jax._src.pallas.mosaic.tpu_info import registry
    except ImportError:
        registry = {}
    before = dict(registry)

    def launch(kernel, *tensors):
        with pytest.raises(OnTheChipNow):
            kernel(*tensors)
        return exported[-1]

    yield launch
    registry.clear()
    registry.update(before)


@pytest.mark.parametrize("m, k, n", [(256, 512, 256), (100, 72, 40)], ids=str)
def test_helions_tpu_launch_exports_the_calls_shape_at_the_asked_precision(torch_tpu_launch, m, k, n):
    """What the two failures were on the chip: at (100, 72) @ (72, 40), under 128-blocks, the
    launcher's substitution exported a (128, 128) product; a float32 dot asked at "highest"
    exported one bf16 pass."""
    a, b = rand(m, k), rand(k, n)
    for dot_precision, contract in (("highest", "fp32"), ("default", "DEFAULT")):
        exported = torch_tpu_launch(matmul_helion.source.device_variants["tpu"].at(dot_precision), a, b)
        assert [tuple(o.shape) for o in exported.out_avals] == [(m, n)]
        assert mosaic_contract_precisions(exported.mlir_module()) == {contract}


def test_the_matmul_templates_tpu_launch_exports_every_test_shape(torch_tpu_launch, template_op):
    """The TPU suite's failing call, (128, 256) @ (256, 128) under 256-blocks, exported a
    [256, 256] product and one bf16 pass."""
    op, shapes = template_op
    kernel = op.source.device_variants["tpu"].at("highest")
    for name, (m, k, n) in shapes.TEST.items():
        exported = torch_tpu_launch(kernel, rand(m, k), rand(k, n))
        assert [tuple(o.shape) for o in exported.out_avals] == [(m, n)], name
        assert mosaic_contract_precisions(exported.mlir_module()) == {"fp32"}, name
