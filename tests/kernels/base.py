"""The tests every kernel family gets, written once: a family's test file subclasses
`KernelFamilyTests`, names its family, and adds only what is its own (numerics that bite,
its argument errors, its block sizes).

Everything here reads the family's registration (`tpu_kernels.kernels.FAMILIES`): the op,
its torch reference, `shapes.TEST`, the statics every call passes (`Family.kwargs`), the
input maker and the Helion twin. A new family gets all of it by subclassing:

    class TestMyOp(KernelFamilyTests):
        family = "my_op"
        zero_size_shapes = [(0, 8), (3, 0)]

and tests/kernels/test_families.py fails while a registered family has no subclass.
The class attributes below are the knobs; each override in a family file says why.

Parameters (pytest_generate_tests below): `shape_name` runs over `shapes.TEST`, `dtype`
over the float dtypes, `grad_dtype` over float32 and bfloat16, `zero_shape` over
`zero_size_shapes`, `int_dtype` over the integer and bool dtypes, `mode` over Helion's two
CPU modes. Inputs are fresh random values (never zeros) from the family's own maker.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import pytest
import torch

from tests.helpers import FLOAT_DTYPES, assert_close
from tests.kernels.checks import compile_matches_eager, lowers_for_tpu, opcheck
from tpu_kernels.errors import InvalidArgumentError, InvalidArgumentTypeError
from tpu_kernels.kernels import FAMILIES
from tpu_kernels.kernels.registry import Family

GRAD_DTYPES = [torch.float32, torch.bfloat16]
INT_DTYPES = [torch.int32, torch.int64, torch.uint8, torch.bool]
HELION_MODES = ["pallas", "eager"]
_JAX_NAMES = {torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool"}


def _leaves(inputs: Sequence[torch.Tensor], dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """Fresh leaves that require grad (in `dtype` if given): the caller's inputs stay as they
    were. Integer inputs (class labels) pass through as they are: they have no gradient."""
    return [
        t.detach().to(dtype or t.dtype).clone().requires_grad_(True) if t.is_floating_point() else t
        for t in inputs
    ]


def _wide(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The float inputs in float64 (the references' precision); integer ones as they are."""
    return [t.double() if t.is_floating_point() else t for t in inputs]


def _forward_backward(fn: Any, inputs: Sequence[torch.Tensor], **kwargs: Any):
    """fn's output, and each float input's gradient of out.sum() (the zero-size tests: any
    cotangent is empty)."""
    leaves = _leaves(inputs)
    out = fn(*leaves, **kwargs)
    g = torch.ones_like(out)  # zero-size outputs: any cotangent is empty
    out.backward(g)
    return out.detach(), [t.grad for t in leaves if t.requires_grad]


class KernelFamilyTests:
    """Not collected itself (no `Test` prefix); each subclass is one family's test class."""

    family: ClassVar[str]
    # statics only the kernel takes (block sizes), on top of the family's kwargs, in the
    # reference and gradient tests: small blocks make the small TEST shapes span several
    kernel_kwargs: ClassVar[dict[str, Any]] = {}
    # shapes (in the family's shape format) with a zero-size dimension
    zero_size_shapes: ClassVar[list[Any]] = []
    # the TEST shapes the Helion twin runs, in both CPU modes
    helion_shapes: ClassVar[list[str]] = []
    # the TEST shape of opcheck, the compile test and the integer-refusal test
    small_shape: ClassVar[str]
    # gradcheck's shape: small, as gradcheck runs the op twice per input element
    gradcheck_shape: ClassVar[Any]
    # three shapes, aligned to the TPU's tiles and not, that default torch.compile runs in a
    # row (the second recompiles with dynamic sizes): whatever the eager call accepts
    compile_shapes: ClassVar[list[Any]]

    # ---- the family, its inputs and calls ---------------------------------------------

    @property
    def fam(self) -> Family:
        return FAMILIES[self.family]

    def inputs(self, shape: Any, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
        return self.fam.inputs(shape, dtype, torch.device("cpu"))

    def call(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.fam.op(*inputs, **self.fam.kwargs, **self.kernel_kwargs)

    def reference(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.fam.torch_reference(*inputs, **self.fam.kwargs)

    def out_scale(self, shape: Any, dtype: torch.dtype) -> float:
        """The output's typical magnitude (assert_close's `scale`) at `shape` in `dtype`."""
        return 1.0

    def grad_scales(self, shape: Any, dtype: torch.dtype) -> Sequence[float]:
        """Each input gradient's typical magnitude: by default the output's, times the square
        root of how many output elements sum into each of the input's (a broadcast input's
        gradient is a sum over the broadcast rows). A family whose gradients are dot
        products (matmul) overrides it."""
        inputs = self.inputs(shape)
        out = self.reference(*_wide(inputs))
        return [
            self.out_scale(shape, dtype) * max(1.0, out.numel() / max(t.numel(), 1)) ** 0.5 for t in inputs
        ]

    def tensor_names(self) -> list[str]:
        """The op's tensor parameters, in order (the names its errors use)."""
        return [p.name for p in self.fam.op.spec.signature.tensor_params]

    def float_names(self) -> list[str]:
        """The tensor parameters the family's inputs give floats (not class labels)."""
        inputs = self.inputs(self.fam.shapes.TEST[self.small_shape])
        return [n for n, t in zip(self.tensor_names(), inputs) if t.is_floating_point()]

    def helion_call(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.fam.helion_op()(*inputs, **self.fam.kwargs)

    # ---- parameters ---------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        fam = FAMILIES[self.family]
        names = metafunc.fixturenames
        if "shape_name" in names:
            metafunc.parametrize("shape_name", list(fam.shapes.TEST))
        if "dtype" in names:
            metafunc.parametrize("dtype", FLOAT_DTYPES, ids=str)
        if "grad_dtype" in names:
            metafunc.parametrize("grad_dtype", GRAD_DTYPES, ids=str)
        if "int_dtype" in names:
            metafunc.parametrize("int_dtype", INT_DTYPES, ids=str)
        if "zero_shape" in names:
            metafunc.parametrize("zero_shape", self.zero_size_shapes, ids=str)
        if "helion_shape" in names:
            metafunc.parametrize("helion_shape", self.helion_shapes)
        if "mode" in names:  # a family without a twin: an empty set, which pytest reports as skipped
            metafunc.parametrize("mode", HELION_MODES if fam.helion else [])

    # ---- the op against its float64 reference -------------------------------------------

    def test_matches_float64_reference(self, shape_name, dtype):
        shape = self.fam.shapes.TEST[shape_name]
        inputs = self.inputs(shape, dtype)
        out = self.call(*inputs)
        expected = self.reference(*_wide(inputs))
        assert out.dtype == dtype and out.shape == expected.shape, (out.dtype, out.shape, expected.shape)
        assert_close(
            out, expected, dtype, scale=self.out_scale(shape, dtype), what=f"{self.family} {shape_name}"
        )

    def test_gradients_match_float64_reference(self, shape_name, grad_dtype):
        shape = self.fam.shapes.TEST[shape_name]
        inputs = self.inputs(shape, grad_dtype)
        ours, wide = _leaves(inputs), _leaves(_wide(inputs))
        out = self.call(*ours)
        g = torch.randn(out.shape, dtype=torch.float64)  # fresh, never zeros
        floats = [i for i, t in enumerate(ours) if t.requires_grad]
        got = torch.autograd.grad((out * g.to(grad_dtype)).sum(), [ours[i] for i in floats])
        want = torch.autograd.grad(
            (self.reference(*wide) * g.to(grad_dtype).double()).sum(), [wide[i] for i in floats]
        )
        scales = self.grad_scales(shape, grad_dtype)
        for i, a, b in zip(floats, got, want):
            s = scales[i]
            assert a.dtype == grad_dtype and a.shape == ours[i].shape
            assert_close(a, b, grad_dtype, scale=s, what=f"{self.family} {shape_name} grad of input {i}")

    def test_gradcheck_in_float64(self):
        """torch's finite-difference check of the backward in float64. fast_mode compares
        v^T J u for random u, v instead of every Jacobian entry: two forwards per input, not
        two per input element (67 s for matmul's shape, every entry); the float32/bf16
        gradient test above compares each gradient element."""
        inputs = _leaves(self.inputs(self.gradcheck_shape, torch.float64))
        assert torch.autograd.gradcheck(lambda *ts: self.call(*ts), inputs, fast_mode=True)

    # ---- the op as a torch op -----------------------------------------------------------

    def test_opcheck(self):
        inputs = _leaves(self.inputs(self.fam.shapes.TEST[self.small_shape]))
        opcheck(self.fam.op, tuple(inputs), {**self.fam.kwargs, **self.kernel_kwargs})

    def test_compile_fullgraph_matches_eager(self):
        inputs = _leaves(self.inputs(self.fam.shapes.TEST[self.small_shape]))

        def model(first, *rest):
            return (self.call(first.tanh(), *rest) * 1.5).square().mean()

        compile_matches_eager(model, inputs, rtol=1e-4, atol=1e-5)

    def test_default_compile_runs_every_shape_the_eager_call_runs(self):
        """Default torch.compile (Inductor; the second shape recompiles with dynamic sizes)
        over three shapes, ragged ones included: the eager call's result at each, which
        matches the float64 reference (issue 39: matmul at (24, 384) failed where eager
        refused it too; a block size never makes a shape fail)."""
        torch._dynamo.reset()  # one code object for every family: no cache limit reached
        compiled = torch.compile(lambda *xs: self.fam.op(*xs, **self.fam.kwargs))
        for shape in self.compile_shapes:
            inputs = self.inputs(shape)
            eager = self.fam.op(*inputs, **self.fam.kwargs)
            torch.testing.assert_close(compiled(*inputs), eager, rtol=0, atol=0, msg=str(shape))
            expected = self.reference(*_wide(inputs))
            assert_close(eager, expected, torch.float32, scale=self.out_scale(shape, torch.float32))

    def test_helion_twin_default_compile_agrees_with_its_eager_call(self):
        """The Helion twin in Helion's Pallas CPU mode at the same three shapes: compiled and
        eager give one result, or one refusal naming the op (Helion's Pallas backend runs whole
        tiles only: a shape it cannot tile is an InvalidArgumentError on both paths)."""
        if not self.fam.helion:
            pytest.skip(f"{self.family} has no Helion twin")
        from tpu_kernels.runtime.sources.helion import helion_cpu_mode

        twin = self.fam.helion_op()
        torch._dynamo.reset()
        compiled = torch.compile(lambda *xs: twin(*xs, **self.fam.kwargs))
        with helion_cpu_mode("pallas"):
            for shape in self.compile_shapes:
                inputs = self.inputs(shape)
                try:
                    eager = twin(*inputs, **self.fam.kwargs)
                except InvalidArgumentError as e:
                    assert "Helion's Pallas backend runs whole blocks only" in str(e), e
                    with pytest.raises(InvalidArgumentError, match=re.escape(str(e))):
                        compiled(*inputs)
                    continue
                torch.testing.assert_close(compiled(*inputs), eager, rtol=0, atol=0, msg=str(shape))

    def test_lowers_for_tpu_at_the_quick_benchmark_size(self):
        """The quick benchmark's size in bfloat16 lowers with a Mosaic kernel that fits VMEM."""
        specs = [
            jax.ShapeDtypeStruct(tuple(t.shape), "bfloat16" if t.is_floating_point() else "int32")
            for t in self.fam.inputs(self.fam.quick_shape(), torch.bfloat16, torch.device("meta"))
        ]
        lowers_for_tpu(self.fam.op, *specs, **self.fam.kwargs)

    # ---- edge inputs (docs/dtypes.md: the integer rule) ---------------------------------

    def test_zero_size_inputs_match_torch_forward_and_backward(self, zero_shape):
        inputs = self.inputs(zero_shape)
        out, grads = _forward_backward(self.call, inputs)
        ref_out, ref_grads = _forward_backward(self.reference, inputs)
        assert out.shape == ref_out.shape and out.dtype == ref_out.dtype
        torch.testing.assert_close(out, ref_out)  # empty, or an empty sum's zeros
        for g, rg in zip(grads, ref_grads):
            assert g is not None and g.shape == rg.shape
            torch.testing.assert_close(g, rg)

    def test_integer_inputs_are_refused_naming_the_argument(self, int_dtype):
        """Each tensor argument in turn is integer (the others float): the error names the op,
        that argument, its dtype and what is accepted. Before the rule, rmsnorm(int32) returned
        truncated integers and scale_add and matmul rounded through float32."""
        self._assert_integer_refusal(self.fam.op, self.call, self.float_names(), int_dtype)

    def _assert_integer_refusal(self, op: Any, call: Any, names: list[str], int_dtype: torch.dtype) -> None:
        shape = self.fam.shapes.TEST[self.small_shape]
        positions = [p.name for p in op.spec.signature.tensor_params]
        for arg in names:
            i = positions.index(arg)
            inputs = list(self.inputs(shape))
            inputs[i] = inputs[i].to(int_dtype)
            with pytest.raises(InvalidArgumentTypeError) as info:
                call(*inputs)
            name = op.short_name
            assert (
                f"{name}: argument '{arg}' has dtype {_JAX_NAMES[int_dtype]}; {name} computes in "
                "floating point and accepts float16, bfloat16, float32 or float64"
            ) in str(info.value), str(info.value)

    # ---- the Helion twin, in both CPU modes ---------------------------------------------

    def test_helion_twin_matches_float64_reference(self, helion_shape, mode):
        import tpu_kernels

        shape = self.fam.shapes.TEST[helion_shape]
        for dtype in GRAD_DTYPES:
            inputs = self.inputs(shape, dtype)
            with tpu_kernels.helion_cpu_mode(mode):
                out = self.helion_call(*inputs)
            expected = self.reference(*_wide(inputs))
            assert out.dtype == dtype and out.shape == expected.shape
            assert_close(
                out, expected, dtype, scale=self.out_scale(shape, dtype), what=f"{self.fam.helion} {mode}"
            )

    def test_helion_twin_takes_zero_size_inputs_like_torch(self, zero_shape, mode):
        """Helion cannot launch a zero-size grid; such a call runs the op's reference (or the
        kernel body as eager torch) instead, and gives torch's result, forward and backward."""
        import tpu_kernels

        inputs = self.inputs(zero_shape)
        with tpu_kernels.helion_cpu_mode(mode):
            out, grads = _forward_backward(self.helion_call, inputs)
        ref_out, ref_grads = _forward_backward(self.reference, inputs)
        assert out.shape == ref_out.shape and out.dtype == ref_out.dtype
        torch.testing.assert_close(out, ref_out)
        for g, rg in zip(grads, ref_grads):
            assert g is not None and g.shape == rg.shape
            torch.testing.assert_close(g, rg)

    def test_helion_twin_refuses_integer_inputs_with_the_same_message(self, mode):
        import tpu_kernels

        twin = self.fam.helion_op()
        names = [p.name for p in twin.spec.signature.tensor_params]
        with tpu_kernels.helion_cpu_mode(mode):
            self._assert_integer_refusal(twin, self.helion_call, names, torch.int32)
