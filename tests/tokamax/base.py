"""The tests every Tokamax family gets, read from its registry entry: a family's test file
subclasses `TokamaxFamilyTests` and sets `family` (Tokamax's tests/ops/test_base.py pattern).

    class TestRope(TokamaxFamilyTests):
        family = "rope"

Each test runs once per forward op of the family (`FAMILIES[family].ops`) and per small
concrete CPU call of it (`examples.<op>_small()`, the calls the sharding simulation also
runs), so an op added to a family, or a call added to its examples, is tested without a
line here:

- `test_opcheck`: torch.library.opcheck of the op (schema, fake, autograd registration,
  AOT dispatch) at the call, its floating inputs requiring grad where the op has a
  backward;
- `test_matches_reference`: the op's public function against the family reference of the
  same name (`reference.<op>`, given the same arguments by name) in float64 (and in the
  other `reference_dtypes`), forward and gradients, in strict checked mode
  (`util.check_against_reference`), at the tolerance the op declares for checked mode
  (its `check_reference`: scale, reductions, computes_in);
- `test_compile_fullgraph_matches_eager`: torch.compile(fullgraph=True) of the public
  function at the call is one graph and gives eager's outputs (bit for bit: the same
  JAX executable runs) and, where the op has a backward, its gradients.

What other files already do for every op is not repeated: fakes against the derived
fakes (test_fakes.py), TPU lowering (test_tpu_lowering.py), sharding rules
(test_sharding.py), compiling at three sizes with dynamic shapes
(test_compile_dynamic.py), implementation choice (test_implementation.py).

A subclass may set, each with a comment saying why:
- `reference_dtypes`: what the floating inputs are cast to for `test_matches_reference`
  (None: the call's own dtypes, for ops that accept only some);
- `keep_dtype`: parameters that test leaves in the call's dtype (the op requires it);
- `marks`: marks for some cases, by test name and then by op name or case id
  (`"layer_norm-1"`, `"layer_norm-1-float64"`): `pytest.mark.slow`, or
  `pytest.mark.xfail(strict=True, reason=...)` for a known bug of the op.
This class has no `Test` prefix, so pytest collects its tests only in the subclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pytest
import torch

from tests.helpers import compile_counted
from tests.kernels.checks import compile_matches_eager, opcheck
from tests.tokamax.util import check_against_reference
from tpu_kernels import tokamax
from tpu_kernels.definition.signature import Kind
from tpu_kernels.op import KernelOp
from tpu_kernels.tokamax.registry import Family


def _floating(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _dtype_id(dtype: torch.dtype | None) -> str:
    return "as_given" if dtype is None else str(dtype).removeprefix("torch.")


class TokamaxFamilyTests:
    """The generic tests of one Tokamax family (`family`: its name in tokamax.FAMILIES)."""

    family: ClassVar[str]
    # float64: against the float64 reference with float64's tolerance, where an op's error
    # cannot hide behind rounding; float32: the dtype the ops run in on TPU.
    reference_dtypes: ClassVar[Sequence[torch.dtype | None]] = (torch.float32, torch.float64)
    # parameters whose dtype the op fixes (a float32 table), left as the call gives them
    keep_dtype: ClassVar[frozenset[str]] = frozenset()
    marks: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    # -- parametrization: every test gets (op, index) of each small call; the reference
    # test also a dtype. Ids read `layer_norm-1` and `layer_norm-1-float64`.

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "case" not in metafunc.fixturenames:
            return
        with_dtype = "dtype" in metafunc.fixturenames
        marks = self.marks.get(metafunc.function.__name__, {})
        params = []
        for op in self._family().ops:
            for i in range(len(self._calls(op))):
                case_id = f"{op.short_name}-{i}"
                for dtype in self.reference_dtypes if with_dtype else (None,):
                    full_id = f"{case_id}-{_dtype_id(dtype)}" if with_dtype else case_id
                    values = ((op.short_name, i), dtype) if with_dtype else ((op.short_name, i),)
                    keys = dict.fromkeys((op.short_name, case_id, full_id))
                    params.append(
                        pytest.param(*values, id=full_id, marks=[marks[k] for k in keys if k in marks])
                    )
        metafunc.parametrize(("case", "dtype") if with_dtype else ("case",), params)

    @classmethod
    def _family(cls) -> Family:
        return tokamax.FAMILIES[cls.family]

    @classmethod
    def _calls(cls, op: KernelOp) -> list[tuple[tuple, dict]]:
        """Fresh tensors each time: a test may set requires_grad on them."""
        return list(getattr(cls._family().examples, f"{op.short_name}_small")())

    @classmethod
    def _case(cls, case: tuple[str, int]) -> tuple[KernelOp, tuple, dict]:
        name, i = case
        op = cls._family().op(name)
        args, kwargs = cls._calls(op)[i]
        return op, tuple(args), dict(kwargs)

    def _public(self, op: KernelOp) -> Callable[..., Any]:
        """The family's public function behind `op` (named as it: `public_op`)."""
        (fn,) = [f for f in self._family().functions if f.__name__ == op.short_name]
        return fn

    # -- the tests

    def test_opcheck(self, case):
        op, args, kwargs = self._case(case)
        grads = op.backward_op is not None
        args = tuple(t.requires_grad_() if grads and _floating(t) else t for t in args)
        opcheck(op, args, kwargs)

    def test_matches_reference(self, case, dtype):
        op, args, kwargs = self._case(case)
        names = [p.name for p in op.signature.params][: len(args)]
        public, reference = self._public(op), getattr(self._family().reference, op.short_name)
        if dtype is not None:
            args = tuple(
                t.to(dtype) if _floating(t) and n not in self.keep_dtype else t for n, t in zip(names, args)
            )
        by_name = dict(zip(names, args), **kwargs)
        run_dtype = dtype or next(t.dtype for t in args if _floating(t))
        check_against_reference(
            op.short_name,
            f"small{case[1]}",
            lambda *a: public(**dict(zip(names, a)), **kwargs),
            lambda *a: reference(**dict(zip(names, a)), **kwargs),
            args,
            run_dtype,
            **self._scales(op, by_name, run_dtype),
            grads=op.backward_op is not None,
        )

    def test_compile_fullgraph_matches_eager(self, case):
        op, args, kwargs = self._case(case)
        names = [p.name for p in op.signature.params][: len(args)]
        public = self._public(op)

        def outputs(*a):
            out = public(**dict(zip(names, a)), **kwargs)
            return list(out) if isinstance(out, (tuple, list)) else [out]

        # Every case compiles these two functions (one code object each, whatever the op):
        # forget the earlier cases' graphs, or dynamo's recompile limit (8) ends the run.
        torch._dynamo.reset()
        if op.backward_op is None:  # integer outputs, no gradient: the forward, exactly
            compiled, counter = compile_counted(outputs)
            for got, want in zip(compiled(*args), outputs(*args)):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
            assert counter.frame_count == 1, f"graph breaks: {counter.frame_count} graphs"
            return

        def loss(*a):  # every floating output in the loss, so every gradient is checked
            return sum(o.float().square().mean() for o in outputs(*a) if o.is_floating_point())

        compile_matches_eager(loss, [t.requires_grad_() if _floating(t) else t for t in args])

    @staticmethod
    def _scales(op: KernelOp, by_name: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
        """The atol multiples the op declares for checked mode (`check_reference`) at this
        call: per output and per floating input's gradient, and the dtype whose tolerance
        applies (`computes_in`)."""
        ref = op.check_reference
        floating = [
            p.name
            for p in op.signature.params
            if p.kind in (Kind.TENSOR, Kind.OPTIONAL_TENSOR) and _floating(by_name.get(p.name))
        ]
        return dict(
            out_scale=[ref.atol_scale(by_name, dtype, name=n) for n in op.output_names[: op.n_visible]],
            grad_scale=[ref.atol_scale(by_name, dtype, grad=True, name=n) for n in floating],
            tol_dtype=ref.tolerance_dtype(dtype, by_name),
        )
