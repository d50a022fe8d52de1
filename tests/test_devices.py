"""The TPU and CUDA paths, as far as a machine with neither can check them."""

import builtins

import jax
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tpu_kernels import BackendUnavailableError
from tpu_kernels.kernels import matmul, rmsnorm, softmax
from tpu_kernels.kernels.registry import FAMILIES
from tpu_kernels.runtime.devices import cuda as cuda_device
from tpu_kernels.runtime.devices import tpu as tpu_device


@pytest.mark.parametrize("op", [softmax, rmsnorm, matmul], ids=lambda o: o.short_name)
def test_every_device_kernel_is_registered(op):
    for key in ("CPU", "CUDA", "PrivateUse1", "Meta", "Autograd"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name, key), (op.name, key)


def test_the_tpu_kernel_goes_through_torch_tpu_and_exports_for_the_tpu():
    """The TPU kernel builds torch_tpu's jax_op for the kernel; that op's fake function
    runs torch_tpu's own jax.export for platform "tpu", so this lowers the kernel the way
    a TPU call would, without a TPU."""
    pytest.importorskip("torch_tpu")
    kernel = rmsnorm._kernels["PrivateUse1"]
    inner = kernel.inner_op("highest")
    assert "rmsnorm__torch_tpu_highest" in str(inner._name)
    # one inner op per matmul precision (torch_tpu traces once per shape only), each reused
    assert kernel.inner_op("default") is not inner and kernel.inner_op("highest") is inner
    with FakeTensorMode():
        y, inv_rms = inner(
            torch.empty(256, 1024, dtype=torch.bfloat16), torch.empty(1024, dtype=torch.bfloat16)
        )
    assert y.shape == (256, 1024) and y.dtype == torch.bfloat16
    assert inv_rms.shape == (256, 1) and inv_rms.dtype == torch.float32


def test_tpu_without_torch_tpu_is_a_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_torch_tpu(name, *args, **kwargs):
        if name.startswith("torch_tpu"):
            raise ImportError("No module named 'torch_tpu'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch_tpu)
    with pytest.raises(BackendUnavailableError, match="TPU tensors need torch_tpu.*pip install torch-tpu"):
        tpu_device.torch_tpu_pallas()


def test_cuda_without_jax_cuda_is_a_clear_error():
    try:
        jax.devices("cuda")
        pytest.skip("this machine has JAX's CUDA backend")
    except RuntimeError:
        pass
    with pytest.raises(BackendUnavailableError, match=r"CUDA tensors need JAX's CUDA backend.*jax\[cuda13\]"):
        cuda_device._check_backend()


def test_inner_function_has_the_signature_torch_tpu_reads():
    import inspect

    fn = tpu_device.inner_function(rmsnorm.signature, rmsnorm.fn, 2)
    sig = inspect.signature(fn)
    assert list(sig.parameters) == ["x", "weight", "eps", "block_rows"]
    assert sig.parameters["x"].annotation is jax.Array and sig.parameters["eps"].annotation is float
    assert sig.return_annotation == tuple[jax.Array, jax.Array]


def test_dtensor_placements_translate_to_partition_specs():
    from jax.sharding import PartitionSpec as P
    from torch.distributed.tensor import Partial, Replicate, Shard

    spec = tpu_device.partition_spec
    assert spec([Shard(0)], ["dp"], 2) == P("dp", None)
    assert spec([Replicate()], ["dp"], 2) == P(None, None)
    assert spec([Shard(-1)], ["tp"], 3) == P(None, None, "tp")
    assert spec([Shard(0), Shard(1)], ["dp", "tp"], 2) == P("dp", "tp")
    assert spec([Replicate(), Shard(0)], ["dp", "tp"], 2) == P("tp", None)
    # two mesh dims on one tensor dim: DTensor splits by the first mesh dim first (major)
    assert spec([Shard(0), Shard(0)], ["dp", "tp"], 1) == P(("dp", "tp"))
    assert spec([Shard(0), Shard(0)], ["tp", "dp"], 1) == P(("tp", "dp"))
    with pytest.raises(ValueError, match="pending sum"):
        spec([Partial()], ["dp"], 2)
    with pytest.raises(ValueError, match="mesh_dim_names"):
        spec([Shard(0)], None, 2)
    with pytest.raises(ValueError, match="2 placements for a mesh of 1 dims"):
        spec([Shard(0), Replicate()], ["dp"], 2)
    with pytest.raises(ValueError, match=r"Shard\(2\) is out of range"):
        spec([Shard(2)], ["dp"], 2)


def test_torch_tpu_is_reached_through_its_public_api():
    pytest.importorskip("torch_tpu")
    pallas = tpu_device.torch_tpu_pallas()
    assert pallas is torch.tpu.pallas and callable(pallas.jax_op)


def test_a_mesh_op_goes_through_torch_tpu_with_partition_specs():
    """TpuKernel.mesh_op builds torch_tpu's jax_op over a JAX mesh with the specs
    partition_spec gives; its fake exports the kernel for the TPU with those shardings
    (a one-device CPU mesh here: no TPU needed to build it, only to run it)."""
    pytest.importorskip("torch_tpu")
    import numpy as np
    from jax.sharding import Mesh
    from torch.distributed.tensor import Shard

    mesh = Mesh(np.array(jax.devices()[:1]), ("dp",))
    spec = tpu_device.partition_spec([Shard(0)], ["dp"], 2)
    kernel = softmax._kernels["PrivateUse1"]
    op = kernel.mesh_op(mesh, (spec,), (spec,))
    assert "softmax__torch_tpu_mesh" in str(op._name)
    assert kernel.mesh_op(mesh, (spec,), (spec,)) is op  # built once per (mesh, specs)
    with FakeTensorMode():
        y = op(torch.empty(256, 1024, dtype=torch.bfloat16))
    assert y.shape == (256, 1024) and y.dtype == torch.bfloat16


def test_a_tpu_pallas_kernel_on_a_gpu_device_is_a_clear_error():
    from tpu_kernels.errors import KernelError
    from tpu_kernels.runtime.devices import cpu as cpu_device
    from tpu_kernels.runtime.devices.jax_exec import JaxExecutor

    # CPU arrays, but a device's mode (no interpreter) and device type "cuda": what a shipped
    # TPU kernel meets on a GPU, where its lowering fails (JAX says only AssertionError)
    cpu = softmax._eager_cpu.executor
    cuda_like = {"device_type": "cuda", "mode": lambda self: None}
    transfer = type("CudaLike", (type(cpu_device.TRANSFER),), cuda_like)()
    executor = JaxExecutor(cpu.sig, cpu.fn, transfer, n_outputs=cpu.n_outputs)
    executor._on_device = lambda t: t.is_cpu  # the CPU's tensors stand in for the GPU's
    x = torch.randn(8, 128)
    with pytest.raises(KernelError) as info:
        executor(x)
    msg = str(info.value)
    print(msg)
    assert msg.startswith("tpu_kernels::softmax: cannot run on cuda tensors")
    assert "written for TPU (pltpu.CompilerParams)" in msg and "docs/devices.md" in msg


def _tpu_inner_call(op, values: dict, mode: FakeTensorMode):
    """Call `op`'s torch_tpu inner op the way torch_tpu's own dispatch does: every
    schema argument in order, positionally where the schema allows (keyword-only
    ones by name), on fake tensors, so torch_tpu's fake exports the body for the TPU. The export
    targets the default chip (`lowering.target.targeting`), as it targets the attached one on a
    TPU host: a kernel whose lowering asks for the chip (Mosaic's rule for `sign`, which integer
    floor division uses: attention's grids) failed here when this ran before anything else set
    a target, and passed after."""
    from tpu_kernels.lowering.target import targeting

    inner = op._kernels["PrivateUse1"].inner_op("default")
    fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in values.items()}
    args = [fake[p.name] for p in op.signature.params if not p.keyword_only]
    kwargs = {p.name: fake[p.name] for p in op.signature.params if p.keyword_only and p.name in fake}
    with mode, targeting(None):
        return inner(*args, **kwargs)


@pytest.mark.parametrize("family", sorted(FAMILIES), ids=str)
def test_every_shipped_op_and_its_backward_run_through_the_real_torch_tpu_jax_op(family):
    """torch_tpu's `JaxCallable` passes a kernel's arguments positionally, in its fake and on
    the chip alike; a derived backward's body takes names only (`vjp_kernel`), and failed on
    every TPU tensor until `inner_function` bound them by name. The real jax_op's fake runs
    its own jax.export for the TPU through the same call, so this is that failure without a
    chip, for the forward op and its backward (derived or explicit)."""
    pytest.importorskip("torch_tpu")
    fam = FAMILIES[family]
    shape = next(iter(fam.shapes.TEST.values()))
    tensors = fam.inputs(shape, torch.float32, torch.device("cpu"))
    values = dict(zip([p.name for p in fam.op.signature.tensor_params], tensors))
    values.update(fam.kwargs)
    mode = FakeTensorMode()
    out = _tpu_inner_call(fam.op, values, mode)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    ns, name = fam.op.name.split("::")
    expected = getattr(getattr(torch.ops, ns), name)(*tensors, **fam.kwargs)  # hidden outputs too
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    assert [tuple(o.shape) for o in outs] == [tuple(e.shape) for e in expected]

    bwd = fam.op.backward_op
    assert bwd is not None and "PrivateUse1" in bwd._kernels, f"{fam.op.name} has no TPU backward"
    # the backward's arguments by name: the forward's inputs and statics, its outputs (an
    # explicit backward's residuals), and a fresh cotangent for each other tensor (grad_*)
    by_output = dict(zip(fam.op.output_names, expected))
    visible = iter(expected[: fam.op.n_visible])
    args = {}
    for p in bwd.signature.params:
        if p.name in values:
            args[p.name] = values[p.name]
        elif p.name in by_output:
            args[p.name] = by_output[p.name]
        elif p.is_tensor:
            args[p.name] = torch.randn_like(next(visible))
    result = _tpu_inner_call(bwd, args, FakeTensorMode())
    results = result if isinstance(result, (tuple, list)) else (result,)
    wrt = getattr(fam.op._backward, "wrt", None) or [p.name for p in fam.op.signature.tensor_params]
    grads_of = [values[name] for name in wrt]  # class labels have none
    assert [tuple(r.shape) for r in results[: len(grads_of)]] == [tuple(g.shape) for g in grads_of]


def test_a_kernels_input_error_on_the_tpu_path_keeps_its_kind_and_names_the_op():
    """torch_tpu traces the kernel when it first sees a shape (here in its fake, on the chip at the
    call): the kernel's own check raised a bare ValueError there, not the InvalidArgumentError
    the CPU path raises for the same call (found by the TPU suite's first chip run)."""
    pytest.importorskip("torch_tpu")
    from tpu_kernels.errors import InvalidArgumentError

    kernel = rmsnorm._kernels["PrivateUse1"]
    with FakeTensorMode():
        x, w = torch.empty(8, 128), torch.empty(64)
        with pytest.raises(InvalidArgumentError, match=r"tpu_kernels::rmsnorm: .*weight must have shape"):
            kernel(x, w)


def test_a_tensor_off_the_tpu_is_refused_naming_the_op_and_argument():
    """The TPU kernel gets every call with a TPU tensor among its arguments; another device's
    tensor beside it reached torch_tpu's launch, whose error named neither the op nor the argument."""
    from tpu_kernels.errors import InvalidArgumentError
    from tpu_kernels.kernels import scale_add

    kernel = scale_add._kernels["PrivateUse1"]
    with pytest.raises(
        InvalidArgumentError, match=r"tpu_kernels::scale_add: argument 'x' is on cpu.*\.to\('tpu'\)"
    ):
        kernel(torch.randn(8, 128), torch.randn(8, 128), alpha=2.0)


def test_the_tpu_kernel_finds_torch_tpus_jax_callable_to_launch_directly():
    """A plain TPU call launches through the `JaxCallable` that torch_tpu's op wraps, skipping
    that op's second dispatch (runtime/devices/tpu.py, `jax_callable`). Where a torch or
    torch_tpu version keeps it elsewhere the kernel still runs, through the op, one dispatch
    slower: this test says when that happened with the versions installed."""
    pytest.importorskip("torch_tpu")
    from tpu_kernels.kernels import scale_add
    from tpu_kernels.runtime.devices.tpu import jax_callable

    kernel = scale_add._kernels["PrivateUse1"]
    op = kernel.inner_op("default")
    found = jax_callable(op)
    assert found is not op, "torch_tpu's jax_op op no longer keeps its JaxCallable as _init_fn"
    assert type(found).__name__ == "JaxCallable" and kernel._callable["default"] is found
    other = object()
    assert jax_callable(other) is other  # anything else: the op itself


def test_a_launch_is_remembered_under_the_key_torch_tpus_jax_callable_builds():
    """A key the eager shortcut has launched before goes straight to torch_tpu's C++ launch
    (runtime/devices/tpu_launch.py), with what `JaxCallable` derived for it: found under the
    key its own `__call__` builds. Here the real `JaxCallable` registers the kernel and then
    fails at its launch (no TPU device), so the fingerprint is there and the output
    placeholders are not: nothing is remembered, and the next call takes `JaxCallable`'s path
    again. The launch itself runs in the TPU suite (tests/tpu/test_ops.py)."""
    pytest.importorskip("torch_tpu")
    from tpu_kernels import _compat
    from tpu_kernels.kernels import matmul, scale_add
    from tpu_kernels.runtime.devices.tpu_launch import DirectLaunch

    for op, args, calls in (
        (scale_add, (torch.randn(8, 128), torch.randn(8, 128)), ({"alpha": 2.0}, {"alpha": 3.0})),
        (matmul, (torch.randn(16, 32), torch.randn(32, 8)), ({}, {"block_m": 8})),
    ):
        kernel = op._kernels["PrivateUse1"]
        kernel.inner_op("default")
        fn, direct = kernel._callable["default"], kernel._direct["default"]
        assert isinstance(direct, DirectLaunch) and direct.fn is fn
        keys = []
        for kwargs in calls:
            full = {p.name: p.default for p in op.signature.params if p.keyword_only}
            full.update(kwargs)
            with pytest.raises(RuntimeError):  # its launch: no TPU device here
                fn(*args, **full)
            key = _compat.jax_callable_key(fn, args, full)
            assert key in fn.kernel_key_to_mlir_fingerprint, (op.name, key)
            assert _compat.jax_callable_launch(fn, args, full) is None  # no output placeholders
            direct.remember(("key", *kwargs.items()), args, full)
            keys.append(key)
        assert len(set(keys)) == 2  # a static is part of the key
        assert direct.known(("key",)) is None and not direct._launches
    assert DirectLaunch.for_callable(object(), (0,)) is None  # not a JaxCallable: the public path


def test_a_call_without_residuals_launches_a_kernel_returning_the_visible_outputs_alone():
    """A plain TPU call needs no gradient, so an op with residuals (rmsnorm's inv_rms) launches
    its kernel returning the visible outputs alone: each output of a launch costs torch_tpu
    about a whole call more (bench/reports/torch_tpu_outputs_v5e.json). Here the real jax_op's
    fake traces and exports that kernel for the TPU: one output, y's shape and dtype; the eager
    shortcut launches it, and an op whose outputs are all visible has no such kernel."""
    pytest.importorskip("torch_tpu")
    from tpu_kernels.dispatch.eager_device import EagerDeviceCall
    from tpu_kernels.kernels import scale_add

    kernel = rmsnorm._kernels["PrivateUse1"]
    assert kernel.visible_only and kernel.n_visible == 1 and kernel.n_outputs == 2
    op = kernel.visible_op("default")
    fn = kernel._visible_callable["default"]
    assert type(fn).__name__ == "JaxCallable" and kernel._visible_direct["default"] is not None
    mode = FakeTensorMode()
    x, w = (mode.from_tensor(torch.randn(*s).to(torch.bfloat16)) for s in ((16, 256), (256,)))
    with mode:
        y = op(x, w, eps=1e-6, block_rows=None)
    assert isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == x.dtype
    shortcut = EagerDeviceCall.for_op(rmsnorm, "PrivateUse1", "tpu")
    assert shortcut.launch == kernel.launch_visible and shortcut.n_visible == 1

    other = scale_add._kernels["PrivateUse1"]
    assert not other.visible_only
    with pytest.raises(ValueError, match="every output is visible"):
        other.visible_op("default")
    assert EagerDeviceCall.for_op(scale_add, "PrivateUse1", "tpu").launch == other.launch


def test_a_tpu_call_that_cannot_fit_the_chips_memory_is_refused_before_it_launches():
    """torch_tpu reports a program too large for the chip only when a result is read, and not
    always by name (docs/devices.md): a call whose arguments and outputs exceed the chip's
    memory is refused first, naming the op, each output and the memory, with CUDA's
    OutOfMemoryError class; nothing is launched (here no TPU exists, so reaching torch_tpu
    would raise something else). A call that fits is remembered by its key and launched."""
    from tpu_kernels.runtime.devices.tpu_memory import MemoryCheck, chip_bytes

    kernel = matmul._kernels["PrivateUse1"]
    kernel = getattr(kernel, "kernel", kernel)  # the TpuKernel inside a bucketed op's padding
    a, b = torch.randn(512, 256), torch.randn(256, 1024)  # 0.5 + 1 MiB in, 2 MiB out
    values = (a, b) + tuple(d for _, d in kernel._keyword_defaults)
    check = MemoryCheck(kernel.qualname, kernel.sig, kernel.fn, memory=lambda: 3 << 20)
    with pytest.raises(torch.OutOfMemoryError) as info:
        check.check(values, ("key", 1))
    msg = str(info.value)
    print(msg)
    assert msg.startswith("tpu_kernels::matmul: this call needs 3.50 MiB of TPU memory for its arguments (1.50 MiB)")
    assert "outputs (float32[512, 1024] (2.00 MiB)), more than the chip's 3.00 MiB" in msg and "nothing was launched" in msg
    big = MemoryCheck(kernel.qualname, kernel.sig, kernel.fn, memory=lambda: 4 << 20)
    big.check(values, ("key", 1))  # fits: remembered
    assert ("key", 1) in big._fits
    kernel.memory.memory, before = (lambda: 3 << 20), kernel.memory.memory
    try:
        with pytest.raises(torch.OutOfMemoryError, match="tpu_kernels::matmul: this call needs"):
            kernel.launch(values, ("test_tpu_memory", 1))
    finally:
        kernel.memory.memory = before
    assert chip_bytes() is None  # no TPU here: no check at all


def test_int64_arguments_reach_a_tpu_kernel_as_new_int32_tensors():
    """torch_tpu's jax_op fails on an int64 input (seen on the v5e with class labels): the TPU
    kernel narrows each int64 tensor to a new int32 one, leaving the caller's as it was, and
    passes every other value through as the same object."""
    from tpu_kernels.runtime.devices.tpu import _narrowed

    labels, x, n = torch.tensor([3, -100, 7]), torch.randn(3), 5
    assert _narrowed((x, n)) == (x, n)
    got = _narrowed((x, labels, n))
    assert got[0] is x and got[2] == n and got[1].dtype == torch.int32
    assert got[1].tolist() == [3, -100, 7] and labels.dtype == torch.int64 and got[1] is not labels
