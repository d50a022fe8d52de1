"""runtime/mosaic_precision.py: under traced_at(name), XLA dots follow `name` and the dots of
Pallas kernel bodies run at a precision Mosaic compiles.

JAX 0.10.2's Mosaic lowering (the TPU machine's JAX) accepts a float32 dot at DEFAULT or
HIGHEST only: traced under jax.default_matmul_precision("high") or "tensorfloat32", the
export below raised "NotImplementedError: Unsupported dot precision: HIGH" there (checked in
a JAX 0.10.2 environment). The pinned JAX lowers HIGH (as Mosaic's bf16x3), so here the tests
also read the precisions in the kernel's jaxpr, which are what 0.10.2 refused.

Imports no torch (the module must run where torch is absent), except the subprocess test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.extend import core as jex_core

from tpu_kernels.lowering.jaxprs import pallas_calls
from tpu_kernels.runtime import mosaic_precision
from tpu_kernels.runtime.mosaic_precision import kernel_precision, traced_at

S = jax.ShapeDtypeStruct((256, 256), jnp.float32)
MOSAIC_0_10_ACCEPTS = {"DEFAULT", "HIGHEST"}
# JAX name -> (XLA dots, dots in a Pallas kernel body)
EXPECTED = {
    "default": ("DEFAULT", "DEFAULT"),
    "bfloat16": ("DEFAULT", "DEFAULT"),
    "high": ("HIGH", "HIGHEST"),
    "tensorfloat32": ("HIGH", "HIGHEST"),
    "highest": ("HIGHEST", "HIGHEST"),
    "float32": ("HIGHEST", "HIGHEST"),
}


def _dot_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...])


def _pallas_dot(x, y):
    return pl.pallas_call(_dot_kernel, out_shape=S)(x, y)


def xla_and_pallas(name):
    """A fresh function (JAX caches traces per function) with one XLA dot and one Pallas kernel
    dot, traced at `name`."""

    def f(x, y):
        with traced_at(name):
            return jnp.dot(x, y) + _pallas_dot(x, y)

    return f


def _dots(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for sub in jex_core.jaxprs_in_params(eqn.params):
            yield from _dots(sub)


def _names(eqns):
    out = set()
    for eqn in eqns:
        p = eqn.params["precision"]
        out.add("DEFAULT" if p is None else p[0].name if isinstance(p, tuple) else str(p))
    return out


def precisions(closed_jaxpr):
    """(precisions of the dots outside Pallas kernels, of the dots inside them)."""
    kernels = [eqn.params["jaxpr"] for eqn in pallas_calls(closed_jaxpr)]
    inside = {id(e) for k in kernels for e in _dots(k)}
    outside = [e for e in _dots(closed_jaxpr.jaxpr) if id(e) not in inside]
    return _names(outside), _names(e for k in kernels for e in _dots(k))


def stablehlo_dot_precisions(text):
    # the Pallas kernel is serialized inside its tpu_custom_call: these are the XLA dots only
    return {
        m or "DEFAULT"
        for m in re.findall(r"stablehlo\.dot_general [^\n]*?(?:precision = \[(\w+),|$)", text, re.M)
    }


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_name_lowers_for_the_tpu_with_kernels_at_a_mosaic_precision(name):
    xla, kernel = EXPECTED[name]
    assert precisions(jax.make_jaxpr(xla_and_pallas(name))(S, S)) == ({xla}, {kernel})
    assert kernel in MOSAIC_0_10_ACCEPTS
    exported = jax.export.export(jax.jit(xla_and_pallas(name)), platforms=["tpu"])(S, S)
    text = exported.mlir_module()
    assert "tpu_custom_call" in text
    assert stablehlo_dot_precisions(text) == {xla}


def _mesh_kernel_body(x_hbm, y_hbm, o_hbm):
    def scoped(x, y, o):
        pltpu.sync_copy(x_hbm, x)
        pltpu.sync_copy(y_hbm, y)
        o[...] = jnp.dot(x[...], y[...])
        pltpu.sync_copy(o, o_hbm)

    pl.run_scoped(scoped, *[pltpu.VMEM(S.shape, S.dtype)] * 3)


# create_tensorcore_mesh is the one constructor JAX 0.10.2 and 0.12 both take (0.12 deprecates it)
@pytest.mark.filterwarnings("ignore:pltpu.create_tensorcore_mesh is deprecated:DeprecationWarning")
def test_a_mesh_kernel_lowers_at_high_too():
    # pl.kernel (a kernel over a core mesh, traced through mpmd_map, not pallas_call)
    def f(x, y):
        with traced_at("high"):
            mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)
            return pl.kernel(_mesh_kernel_body, out_type=S, mesh=mesh)(x, y)

    # a TPU target for the mesh on a machine without one
    device = jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu")
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), (), abstract_device=device)):
        assert _names(_dots(jax.make_jaxpr(f)(S, S).jaxpr)) == {"HIGHEST"}
        exported = jax.export.export(jax.jit(f), platforms=["tpu"])(S, S)
    assert "tpu_custom_call" in exported.mlir_module()


def test_outside_traced_at_pallas_traces_as_jax_ships_it():
    # the hook is installed process-wide once traced_at ran; outside it, nothing changes
    with traced_at("high"):
        pass

    def f(x, y):
        with jax.default_matmul_precision("high"):
            return _pallas_dot(x, y)

    assert precisions(jax.make_jaxpr(f)(S, S)) == (set(), {"HIGH"})


def test_jit_never_reuses_a_trace_across_traced_at():
    # whether traced_at is active is part of jit's cache key (a jax.make_user_context value)
    g = jax.jit(lambda x, y: _pallas_dot(x, y))

    def plain(x, y):
        with jax.default_matmul_precision("high"):
            return g(x, y)

    def hooked(x, y):
        with traced_at("high"):
            return g(x, y)

    assert precisions(jax.make_jaxpr(plain)(S, S))[1] == {"HIGH"}
    assert precisions(jax.make_jaxpr(hooked)(S, S))[1] == {"HIGHEST"}
    assert precisions(jax.make_jaxpr(plain)(S, S))[1] == {"HIGH"}


NAMES = sorted(EXPECTED)
EXPLICIT = [None, jax.lax.Precision.DEFAULT, jax.lax.Precision.HIGH, jax.lax.Precision.HIGHEST]


@settings(max_examples=25, deadline=None)
@given(
    outer=st.sampled_from(NAMES), inner=st.sampled_from([None, *NAMES]), explicit=st.sampled_from(EXPLICIT)
)
def test_kernel_dots_follow_the_ambient_name_or_an_explicit_precision(outer, inner, explicit):
    # Under traced_at(outer), code may enter its own default precision (`inner`) before calling
    # a kernel, and a kernel author may name a dot's precision (`explicit`): the XLA dot follows
    # the ambient name; the kernel's dot is the explicit precision as written (HIGH included),
    # else the ambient name as Mosaic needs it.
    def kern(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=explicit)

    def f(x, y):
        with traced_at(outer), jax.default_matmul_precision(inner or outer):
            return jnp.dot(x, y) + pl.pallas_call(kern, out_shape=S)(x, y)

    ambient = inner or outer
    want_kernel = explicit.name if explicit is not None else EXPECTED[ambient][1]
    assert precisions(jax.make_jaxpr(f)(S, S)) == ({EXPECTED[ambient][0]}, {want_kernel})


def test_kernel_precision_of_names():
    assert [kernel_precision(n) for n in ("high", "tensorfloat32", "highest", "default", "bfloat16")] == [
        "highest",
        "highest",
        "highest",
        "default",
        "bfloat16",
    ]
    assert kernel_precision("BF16_BF16_F32_X3") == "BF16_BF16_F32_X3"  # a preset: left as it is


def test_without_the_hook_everything_is_traced_at_the_kernel_precision(monkeypatch):
    # a JAX that moved tracing_grid_env: more accurate than asked, never refused, and said once
    monkeypatch.setattr(mosaic_precision, "_hooked", None)
    monkeypatch.setattr(mosaic_precision._compat, "wrap_pallas_kernel_tracing", lambda around: False)
    with pytest.warns(RuntimeWarning, match="tracing_grid_env"):
        jaxpr = jax.make_jaxpr(xla_and_pallas("high"))(S, S)
    assert precisions(jaxpr) == ({"HIGHEST"}, {"HIGHEST"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.make_jaxpr(xla_and_pallas("high"))(S, S)  # no second warning


def test_imports_and_works_where_torch_cannot_be_imported():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import jax, jax.numpy as jnp\n"
        "from jax.experimental import pallas as pl\n"
        "from tpu_kernels.runtime.mosaic_precision import traced_at\n"
        "S = jax.ShapeDtypeStruct((8, 128), jnp.float32)\n"
        "def k(x, o): o[...] = jnp.dot(x[...], x[...].T)[:, :1] + x[...]\n"
        "def f(x):\n"
        "    with traced_at('high'):\n"
        "        return pl.pallas_call(k, out_shape=S)(x)\n"
        "print('HIGHEST' in str(jax.make_jaxpr(f)(S)), 'torch' in sys.modules and sys.modules['torch'] is not None)\n"
    )
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "False"], run.stdout + run.stderr


def _split_dot_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = mosaic_precision.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


def _split_dot(x, y):
    return pl.pallas_call(_split_dot_kernel, out_shape=S)(x, y)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_dot_is_three_bf16_passes_where_high_was_asked_and_lowers_for_the_tpu(name):
    # `dot` in a kernel body: HIGH-class names give three bf16 dots (the product XLA's dot
    # computes at HIGH) and no float32 dot at all, whatever Mosaic takes; other names the
    # kernel dot as before (HIGHEST for "highest", DEFAULT for "default")
    def f(x, y):
        with traced_at(name):
            return _split_dot(x, y)

    jaxpr = jax.make_jaxpr(f)(S, S)
    kernel = [eqn.params["jaxpr"] for eqn in pallas_calls(jaxpr)][0]
    dots = list(_dots(kernel))
    high = EXPECTED[name][0] == "HIGH"
    if high:
        assert len(dots) == 3 and _names(dots) == {"DEFAULT"}
        assert all(str(d.invars[0].aval.dtype) == "bfloat16" == str(d.invars[1].aval.dtype) for d in dots)
    else:
        assert len(dots) == 1 and _names(dots) == {EXPECTED[name][1]}
    assert _names(dots) <= MOSAIC_0_10_ACCEPTS
    jax.export.export(jax.jit(f), platforms=["tpu"])(S, S)


def test_dot_outside_traced_at_follows_the_default_precision_too():
    # jax.default_matmul_precision("high") with no traced_at (the chip runner's kernels called
    # from JAX): still three passes, never a HIGH dot Mosaic would refuse
    def f(x, y):
        with jax.default_matmul_precision("high"):
            return _split_dot(x, y)

    kernel = [eqn.params["jaxpr"] for eqn in pallas_calls(jax.make_jaxpr(f)(S, S))][0]
    assert len(list(_dots(kernel))) == 3


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.sampled_from([128, 256, 512]),
    scale=st.sampled_from([1e-3, 1.0, 1e4]),
)
def test_three_pass_dot_error_is_that_of_bf16_3x(seed, k, scale):
    # In the CPU interpreter each bf16 pass is exact in float32, so what is left is the split's
    # own truncation: x_lo y_lo is dropped and each half is rounded to bf16 (about 2^-16
    # relative), far under one pass's 2^-8 and at most XLA's HIGH on a v5e (1.3e-5).
    print(f"seed={seed} k={k} scale={scale}")
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((128, k)) * scale).astype(np.float32)
    y = (rng.standard_normal((k, 128)) * scale).astype(np.float32)
    shape = jax.ShapeDtypeStruct((128, 128), jnp.float32)

    def f(a, b):
        with traced_at("high"):
            return pl.pallas_call(_split_dot_kernel, out_shape=shape, interpret=True)(a, b)

    out = np.asarray(jax.jit(f)(x, y), np.float64)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    one_pass = np.asarray(x.astype(jnp.bfloat16), np.float64) @ np.asarray(y.astype(jnp.bfloat16), np.float64)
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert err < 2e-5
    assert err < np.linalg.norm(one_pass - ref) / np.linalg.norm(ref) / 50


def test_a_kernel_body_traced_at_highest_is_never_reused_at_high_or_back():
    # inside the body both read "highest" as the default; Pallas caches body traces by their
    # trace context, which holds the asked name too (a user context), so each gets its own
    counts = []
    for name in ("highest", "high", "highest", "tensorfloat32", "default", "high"):

        def f(x, y, name=name):
            with traced_at(name):
                return _split_dot(x, y)

        kernel = [eqn.params["jaxpr"] for eqn in pallas_calls(jax.make_jaxpr(f)(S, S))][0]
        counts.append(len(list(_dots(kernel))))
    assert counts == [1, 3, 1, 3, 1, 3]


def _mosaic_matmul_precisions(f, dtype):
    from tpu_kernels.lowering.export import mosaic_modules

    spec = jax.ShapeDtypeStruct((256, 256), dtype)
    text = jax.export.export(jax.jit(f), platforms=["tpu"])(spec, spec).mlir_module()
    modules = mosaic_modules(text)
    assert modules, "the lowering holds no Mosaic kernel"
    lines = [line for m in modules for line in m.splitlines() if "tpu.matmul" in line]
    assert lines
    return {(re.search(r"contract_precision<(\w+)>", line) or [None, "DEFAULT"])[1] for line in lines}


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32], ids=["bf16", "f32"])
def test_only_float32_dots_ask_mosaic_for_a_float32_contraction(name, dtype):
    """A bf16 dot traced at "high" or "highest" (torch.set_float32_matmul_precision, which many
    training scripts set) asked Mosaic for contract_precision<fp32>, which it refuses on a TPU
    ("Bad lhs type": every bf16 Pallas matmul failed to compile there). A product with no float32
    operand is exact in one pass: it lowers without one; a float32 dot keeps what it asked for."""

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def f(x, y):
        with traced_at(name):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32))(x, y)

    got = _mosaic_matmul_precisions(f, dtype)
    if dtype == jnp.float32:
        assert got == {"fp32" if EXPECTED[name][1] == "HIGHEST" else "DEFAULT"}
    else:
        assert got == {"DEFAULT"}


@pytest.mark.parametrize("name", ["high", "highest"])
def test_the_shipped_matmul_in_bf16_lowers_without_a_float32_contraction(name):
    from tpu_kernels.kernels.matmul.pallas import matmul as pallas_matmul

    def f(a, b):
        with traced_at(name):
            return pallas_matmul(a, b)

    assert _mosaic_matmul_precisions(f, jnp.bfloat16) == {"DEFAULT"}


@pytest.mark.parametrize("name", ["high", "tensorfloat32", "highest"])
def test_dot_of_bf16_operands_is_one_pass_at_any_name(name):
    # a bf16 product is exact in one MXU pass: `dot` splits float32 operands only (a bf16
    # operand's low half is zero, so three passes would triple the work for the same result)
    bf16 = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = mosaic_precision.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def f(x, y):
        with traced_at(name):
            return pl.pallas_call(kernel, out_shape=S)(x, y)

    [body] = [eqn.params["jaxpr"] for eqn in pallas_calls(jax.make_jaxpr(f)(bf16, bf16))]
    [one] = list(_dots(body))
    assert str(one.invars[0].aval.dtype) == "bfloat16"


@pytest.mark.parametrize("name", ["highest", "default"])
def test_a_dot_with_one_float32_operand_keeps_its_float32_contraction(name):
    """Mosaic is asked for one pass only where no operand is float32: a float32 x bf16 product
    at "highest" keeps contract_precision<fp32> (one pass would round the float32 operand to
    bf16); at "default" it is one pass, as asked."""

    def kernel(x_ref, y_ref, o_ref):
        dims = (((1,), (0,)), ((), ()))
        o_ref[...] = jax.lax.dot_general(x_ref[...], y_ref[...], dims, preferred_element_type=jnp.float32)

    def f(x, y):
        with traced_at(name):
            return pl.pallas_call(kernel, out_shape=S)(x, y)

    from tpu_kernels.lowering.export import mosaic_modules

    bf16 = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    text = jax.export.export(jax.jit(f), platforms=["tpu"])(S, bf16).mlir_module()
    lines = [line for m in mosaic_modules(text) for line in m.splitlines() if "tpu.matmul" in line]
    assert lines and all("vector<256x256xbf16>" in line for line in lines)  # the mixed product itself
    got = {(re.search(r"contract_precision<(\w+)>", line) or [None, "DEFAULT"])[1] for line in lines}
    assert got == ({"fp32"} if name == "highest" else {"DEFAULT"})


def test_the_matmul_backwards_transposed_dots_are_three_passes_at_high():
    """matmul's backward contracts a transposed operand (`dot(..., contract=(1, 1))` and
    `(0, 0)`): at "high" each product is still the three-pass split along that contraction,
    within bf16_3x's error of float64 (one pass would be ~2^-8), in the interpreter."""
    from tpu_kernels.kernels.matmul import pallas as mm

    rng = np.random.default_rng(7)
    a, b, g = (rng.standard_normal(s).astype(np.float32) for s in ((200, 384), (384, 136), (200, 136)))
    with traced_at("high"), pltpu.force_tpu_interpret_mode(True):
        ga, gb = jax.jit(mm.matmul_backward)(a, b, g)
    a64, b64, g64 = (x.astype(np.float64) for x in (a, b, g))
    for got, ref in ((ga, g64 @ b64.T), (gb, a64.T @ g64)):
        assert np.linalg.norm(np.asarray(got, np.float64) - ref) / np.linalg.norm(ref) < 2e-5
