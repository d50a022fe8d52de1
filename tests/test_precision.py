"""torch's float32 matmul precision reaches the kernel's trace and the compile-cache key.

XLA on the CPU computes float32 dots in float32 whatever the precision, so these
tests read the precision in the lowered modules' dot ops, not in the numbers.
"""

import importlib.util
import re
import subprocess
import sys
import textwrap
import types

import jax
import jax.experimental.pallas  # noqa: F401 - dot_plus_pallas_dot's kernel
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import hypothesis_settings, needs_tokamax, rand
from tests.test_mosaic_precision import precisions
from tpu_kernels import tpu_kernel
from tpu_kernels.kernels import matmul
from tpu_kernels.runtime import precision

SETTINGS = [("highest", "HIGHEST"), ("high", "HIGH"), ("medium", "DEFAULT")]
S = jax.ShapeDtypeStruct


@tpu_kernel("test_precision::scaled_dot")
def scaled_dot(a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    return jax.numpy.dot(a, b) * alpha


@pytest.fixture(autouse=True)
def restore_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def compiled_dot_precisions(hlo_text: str) -> set[str]:
    """The operand precisions of every dot in a compiled executable's HLO (none printed: DEFAULT)."""
    dots = re.findall(r" dot\([^\n]*", hlo_text)
    assert dots, "no dot in the executable"
    found = set()
    for dot in dots:
        m = re.search(r"operand_precision=\{(\w+),(\w+)\}", dot)
        found |= {m[1].upper(), m[2].upper()} if m else {"DEFAULT"}
    return found


def dot_precisions(module_text: str) -> set[str]:
    """The precision configs of every dot in a lowered module, e.g. {"HIGHEST"}.

    A dot without one is DEFAULT (StableHLO's default): a module that went through
    jax.export's serialization (the on-disk kernel cache) prints DEFAULT that way."""
    dots = re.findall(r"stablehlo\.dot_general [^\n]*", module_text)
    assert dots, "no dot_general in the module"
    found = set()
    for dot in dots:
        m = re.search(r"precision = \[(\w+), (\w+)\]", dot)
        found |= {m[1], m[2]} if m else {"DEFAULT"}
    return found


@pytest.mark.parametrize("torch_name,stablehlo", SETTINGS)
def test_torch_setting_maps_to_jax(torch_name, stablehlo):
    torch.set_float32_matmul_precision(torch_name)
    assert precision.current() == stablehlo.lower()
    assert precision.current() == precision.TORCH_TO_JAX[torch_name]


# The precision the dots of the matmul kernel's body get: Mosaic refuses HIGH
# (runtime/mosaic_precision.py), and the kernel computes "high" as three bf16 passes
# (`mosaic_precision.dot`), each a DEFAULT dot of bf16 halves
IN_PALLAS = {"HIGHEST": "HIGHEST", "HIGH": "DEFAULT", "DEFAULT": "DEFAULT"}
DOTS_IN_PALLAS = {"HIGHEST": 1, "HIGH": 3, "DEFAULT": 1}


@pytest.mark.parametrize("torch_name,stablehlo", SETTINGS)
def test_pallas_kernel_is_lowered_at_the_setting(torch_name, stablehlo):
    torch.set_float32_matmul_precision(torch_name)
    # interpreted on the CPU: the kernel body's dot is an XLA dot in the module
    text = matmul.jax_function().lower(S((64, 128), "float32"), S((128, 128), "float32")).as_text()
    assert dot_precisions(text) == {IN_PALLAS[stablehlo]}
    assert len(re.findall(r"stablehlo\.dot_general ", text)) == DOTS_IN_PALLAS[stablehlo]
    # an explicit choice wins over torch's setting
    text = (
        matmul.jax_function(matmul_precision="highest")
        .lower(S((64, 128), "float32"), S((128, 128), "float32"))
        .as_text()
    )
    assert dot_precisions(text) == {"HIGHEST"}


TORCH_AND_TORCH_TPU = [("torch", n) for n in precision.TORCH_TO_JAX] + [
    ("torch_tpu", n) for n in precision.TPU_TO_JAX
]


@pytest.mark.parametrize("source,name", TORCH_AND_TORCH_TPU)
def test_shipped_matmul_lowers_for_the_tpu_at_every_setting(source, name):
    # JAX 0.10.2 (the TPU machine's) refused the kernel's dot at "high": "Unsupported dot
    # precision: HIGH" (tests/test_mosaic_precision.py); its dots must be DEFAULT or HIGHEST
    jax_name = (precision.TORCH_TO_JAX if source == "torch" else precision.TPU_TO_JAX)[name]
    fn = matmul.jax_function(interpret=None, matmul_precision=jax_name)
    shape = S((256, 256), "float32")
    _, in_kernels = precisions(jax.make_jaxpr(fn)(shape, shape))
    assert in_kernels == {IN_PALLAS[jax_name.upper()]}
    exported = jax.export.export(fn, platforms=["tpu"])(shape, shape)
    assert "tpu_custom_call" in exported.mlir_module()


@tpu_kernel("test_precision::dot_plus_pallas_dot")
def dot_plus_pallas_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = jax.numpy.dot(a_ref[...], b_ref[...])

    out = jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype)
    return jax.numpy.dot(a, b) + jax.experimental.pallas.pallas_call(kernel, out_shape=out)(a, b)


def test_high_and_highest_stay_apart_in_the_compile_cache():
    # Their Pallas kernels are both traced at HIGHEST, but their XLA dots differ: one entry each.
    a, b = rand(16, 128), rand(128, 128)
    ex = dot_plus_pallas_dot.source._executors["cpu"]
    dot_plus_pallas_dot.cache_clear()
    seen = {}
    for torch_name in ("high", "highest", "high"):
        torch.set_float32_matmul_precision(torch_name)
        torch.testing.assert_close(dot_plus_pallas_dot(a, b), 2 * (a @ b))
        key = ex._arrays_and_key([a, b])[1]
        seen[torch_name] = compiled_dot_precisions(ex.cache.peek(key).fn.as_text())
    assert dot_plus_pallas_dot.cache_info().misses == 2 and dot_plus_pallas_dot.cache_info().hits >= 1
    assert seen == {"high": {"HIGH", "HIGHEST"}, "highest": {"HIGHEST"}}


def test_each_setting_compiles_its_own_entry_with_its_precision():
    a, b = rand(16, 32), rand(32, 8)
    ex = scaled_dot.source._executors["cpu"]
    scaled_dot.cache_clear()
    for n, (torch_name, stablehlo) in enumerate(SETTINGS, start=1):
        torch.set_float32_matmul_precision(torch_name)
        out = scaled_dot(a, b, 0.5)
        torch.testing.assert_close(out, (a @ b) * 0.5)
        arrays, key = ex._arrays_and_key([a, b, 0.5])
        assert key[1] == precision.TORCH_TO_JAX[torch_name]
        assert scaled_dot.cache_info().misses == n  # a new setting is a new key
        entry = ex.cache.peek(key)
        assert entry is not None
        # the compiled entry (an executable, from disk or not) holds the precision it was traced with
        assert compiled_dot_precisions(entry.fn.as_text()) == {stablehlo}
    torch.set_float32_matmul_precision("highest")
    scaled_dot(a, b, 0.5)
    assert scaled_dot.cache_info().hits >= 1 and scaled_dot.cache_info().misses == len(SETTINGS)


@pytest.mark.parametrize("torch_name", ["highest", "medium"])
def test_eager_shortcut_builds_the_executors_key(torch_name):
    torch.set_float32_matmul_precision(torch_name)
    a, b = rand(16, 32), rand(32, 8)
    ex = scaled_dot.source._executors["cpu"]
    shortcut = scaled_dot._eager_cpu
    assert shortcut is not None and shortcut.executor is ex
    assert shortcut.key((a, b, 0.5)) == ex._arrays_and_key([a, b, 0.5])[1]


def test_eager_shortcut_runs_the_entry_of_the_current_setting():
    a, b = rand(16, 32), rand(32, 8)
    scaled_dot.cache_clear()
    torch.set_float32_matmul_precision("medium")
    scaled_dot(a, b, 1.0)  # compiles the "default" entry
    torch.set_float32_matmul_precision("highest")
    misses = scaled_dot.cache_info().misses
    scaled_dot(a, b, 1.0)  # must not reuse it through the shortcut's cache peek
    assert scaled_dot.cache_info().misses == misses + 1


def test_torch_compile_reads_the_setting_at_run_time():
    a, b = rand(16, 32), rand(32, 8)
    scaled_dot.cache_clear()
    compiled = torch.compile(lambda x, y: scaled_dot(x, y, 2.0) + 1, fullgraph=True)
    ex = scaled_dot.source._executors["cpu"]
    for torch_name, _ in SETTINGS:
        torch.set_float32_matmul_precision(torch_name)
        torch.testing.assert_close(compiled(a, b), (a @ b) * 2.0 + 1)
        assert ex.cache.peek(ex._arrays_and_key([a, b, 2.0])[1]) is not None
    assert scaled_dot.cache_info().misses == len(SETTINGS)


def test_torch_tpu_precision_is_read_when_torch_tpu_is_imported(monkeypatch):
    # Stands in for torch_tpu's precision module; the real one is checked in a subprocess below.
    class Member:
        def __init__(self, name):
            self.name = name

    fake = types.ModuleType(precision._TPU_IMPL)
    glob = Member("DEFAULT")
    state = {"p": Member("HIGH")}
    fake._get_precision = lambda: state["p"]
    fake._get_global_precision = lambda: glob
    monkeypatch.setitem(sys.modules, precision._TPU_IMPL, fake)
    torch.set_float32_matmul_precision("highest")
    assert precision.current() == "high"  # a torch.tpu.precision context wins over torch's setting
    state["p"] = glob  # no context: torch's getter (which torch_tpu patches on a TPU machine)
    assert precision.current() == "highest"


@pytest.mark.skipif(importlib.util.find_spec("torch_tpu") is None, reason="torch_tpu not installed")
def test_real_torch_tpu_context_and_global_setting():
    # torch_tpu is never imported by tpu_kernels; here a user imports it (a subprocess, since
    # importing it patches torch for the rest of the process). About 8 s, most of it the import.
    code = textwrap.dedent(
        """
        import warnings; warnings.simplefilter("ignore")
        import torch, torch_tpu
        from tpu_kernels.runtime import precision
        seen = [precision.current()]
        torch.set_float32_matmul_precision("high")
        seen.append(precision.current())
        with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
            seen.append(precision.current())
        seen.append(precision.current())
        torch.set_float32_matmul_precision("medium")
        seen.append(precision.current())
        print("SEEN", ",".join(seen))
        """
    )
    env = {**__import__("os").environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("SEEN ")]
    assert lines, run.stdout + run.stderr
    # Without a TPU, torch_tpu does not patch torch's setter (it does where its device
    # registers): torch's own setting holds, and the context overrides it.
    assert lines[0] == "SEEN highest,high,highest,high,default"


def test_import_never_imports_torch_tpu():
    code = "import sys, tpu_kernels.runtime.precision, tpu_kernels.kernels; print('torch_tpu' in sys.modules)"
    env = {**__import__("os").environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.stdout.strip().splitlines()[-1] == "False", run.stderr


@needs_tokamax
@pytest.mark.parametrize("torch_name,stablehlo", SETTINGS)
def test_tokamax_ops_follow_the_setting_unless_given_precision(torch_name, stablehlo):
    from tpu_kernels.tokamax import glu, ragged

    torch.set_float32_matmul_precision(torch_name)
    x, w = S((2, 16, 128), "float32"), S((128, 2, 128), "float32")
    f = glu.gated_linear_unit_op.jax_function(activation="silu", implementation="xla")
    assert dot_precisions(f.lower(x, w, None).as_text()) == {stablehlo}
    f = glu.gated_linear_unit_op.jax_function(activation="silu", implementation="xla", precision="highest")
    assert dot_precisions(f.lower(x, w, None).as_text()) == {"HIGHEST"}
    f = ragged.ragged_dot_op.jax_function(implementation="xla")
    text = f.lower(S((32, 128), "float32"), S((4, 128, 64), "float32"), S((4,), "int32")).as_text()
    assert dot_precisions(text) == {stablehlo}


# Helion's float32 dots: Mosaic compiles DEFAULT and HIGHEST only, so "high" runs at HIGHEST
IN_HELION = {"HIGHEST": "HIGHEST", "HIGH": "HIGHEST", "DEFAULT": "DEFAULT"}


@pytest.mark.parametrize("torch_name,stablehlo", SETTINGS)
def test_helion_dots_follow_the_setting(torch_name, stablehlo):
    # Helion 1.5's Pallas backend writes precision="default" on every dot it emits
    # (helion/_compiler/pallas/backend.py, map_dot_precision): a float32 matmul_helion was 0.25
    # off at K=512 on a v5e under "highest". Now each precision is its own Helion kernel
    # (runtime/sources/helion_pallas.py), chosen at each call: on the CPU the interpret-mode
    # code, lowered here to plain dots (tests/test_helion_pallas.py: the TPU's, both orders).
    from tpu_kernels.kernels.helion_ops import matmul_helion

    torch.set_float32_matmul_precision(torch_name)
    text = matmul_helion.jax_function().lower(S((64, 128), "float32"), S((128, 128), "float32")).as_text()
    assert dot_precisions(text) == {IN_HELION[stablehlo]}


def test_at_precision_fixes_the_trace_precision_of_a_wrapped_function():
    # What the TPU path needs (torch_tpu's jax_op traces the function itself, once per shape):
    # the wrapper keeps its signature, which jax_op reads, and its precision under any ambient one.
    import inspect

    from tpu_kernels.runtime.devices.tpu import inner_function

    fn = precision.at_precision(scaled_dot.fn, "high")
    assert inspect.signature(fn) == inspect.signature(scaled_dot.fn)
    inner = inner_function(scaled_dot.signature, fn, 1)
    with jax.default_matmul_precision("highest"):
        text = (
            jax.jit(inner, static_argnums=2)
            .lower(S((8, 16), "float32"), S((16, 4), "float32"), 2.0)
            .as_text()
        )
    assert dot_precisions(text) == {"HIGH"}
    # and its Pallas kernels at a precision Mosaic compiles (what torch_tpu's export lowers)
    fn = precision.at_precision(dot_plus_pallas_dot.fn, "high")
    with jax.default_matmul_precision("default"):
        jaxpr = jax.make_jaxpr(fn)(S((8, 128), "float32"), S((128, 128), "float32"))
    assert precisions(jaxpr) == ({"HIGH"}, {"HIGHEST"})


@pytest.mark.parametrize("device,in_kernel", [("cpu", "HIGHEST"), ("tpu", "HIGHEST"), ("cuda", "HIGH")])
def test_high_in_pallas_kernels_by_device(device, in_kernel):
    # CUDA's Pallas kernels lower through Triton, which takes HIGH (TF32): left as asked there
    def f(a, b):
        with precision.traced("high", device):
            return dot_plus_pallas_dot.fn(a, b)

    jaxpr = jax.make_jaxpr(f)(S((8, 128), "float32"), S((128, 128), "float32"))
    assert precisions(jaxpr) == ({"HIGH"}, {in_kernel})


@hypothesis_settings(examples=8, random_examples=30)
@given(
    setting=st.sampled_from([name for name, _ in SETTINGS]),
    m=st.sampled_from([8, 100, 300]),
    k=st.sampled_from([128, 200, 640]),
    n=st.sampled_from([128, 300]),
    block_k=st.sampled_from([None, 128]),
    seed=st.integers(0, 2**31 - 1),
)
def test_shipped_matmul_is_right_in_float32_at_every_setting(setting, m, k, n, block_k, seed):
    # "high" is three bf16 passes in the kernel, a float32 result accumulates in its output
    # block: across k steps and padded edges (block_k 128 at K = 200 and 640), every setting
    # stays within bf16_3x's error of the float64 product (on the CPU each pass is exact, so
    # "medium" and "highest" are float32's own error)
    print(f"setting={setting} m={m} k={k} n={n} block_k={block_k} seed={seed}")
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(setting)
        out = matmul(a, b) if block_k is None else matmul(a, b, block_m=128, block_n=128, block_k=block_k)
    finally:
        torch.set_float32_matmul_precision(before)
    exact = a.double() @ b.double()
    assert out.dtype == torch.float32 and out.shape == (m, n)
    assert (out.double() - exact).norm() / exact.norm() < 2e-5
