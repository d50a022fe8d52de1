"""The shipped ops on DTensors over a one-device TPU mesh, in this one process: forward and
backward against the same op on the plain TPU tensors.

The mesh, `init_device_mesh("tpu", (1,))`, needs a default process group. torch_tpu registers
its c10d backend for TPU tensors as "tpu_dist" (also as "tpu"), and maps the "tpu" device to
it (`torch_tpu/_loader.py`, `torch_tpu/_internal/distributed/torchcomm_tpu.py`:
`Backend.default_device_backend_map["tpu"] = "tpu_dist"`); the group here is that backend with
one rank. On one device every shard is the whole tensor, so each case runs the same kernel on
the same values as the plain call: the results agree to the last bit, up to `ATOL`. Placing a
tensor takes no collective here (`local_dtensor`: on the chip, `distribute_tensor`'s broadcast
over the one-rank group aborted the process), and DTensor skips collectives on a mesh dim of
size 1. scripts/tpu-suite runs this file in its own process, so that an abort there ends only it.

The cases mirror the CPU suite's 2-process ones (tests/test_sharding.py, `_worker_cases`):
Replicate and Shard(0) for each op, rmsnorm's and matmul's replicated operand whose gradient
is a pending sum (Partial), and matmul's contraction (Shard(1) x Shard(0): a Partial output).
A failing step says which: the group, the mesh, placing a tensor, the op, its backward.
"""

from __future__ import annotations

import contextlib
import tempfile
from datetime import timedelta

import pytest
import torch

BACKEND = "tpu_dist"  # torch_tpu's c10d backend for TPU tensors (the module docstring)
GROUP_TIMEOUT = timedelta(seconds=60)
ATOL = 1e-6  # float32; the same kernel on the same values: measured 0.0 on CPU (gloo, one rank)

# case -> (family, tensor shapes, input placements, output placement); "S0" Shard(0), "S1"
# Shard(1), "R" Replicate, "P" Partial (a pending sum: matmul's contraction)
CASES = {
    "softmax-R": ("softmax", [(64, 256)], ["R"], "R"),
    "softmax-S0": ("softmax", [(64, 256)], ["S0"], "S0"),
    "rmsnorm-R": ("rmsnorm", [(64, 256), (256,)], ["R", "R"], "R"),
    "rmsnorm-S0": ("rmsnorm", [(64, 256), (256,)], ["S0", "R"], "S0"),
    "scale_add-R": ("scale_add", [(64, 256), (64, 256)], ["R", "R"], "R"),
    "scale_add-S0": ("scale_add", [(64, 256), (64, 256)], ["S0", "S0"], "S0"),
    "matmul-RxR": ("matmul", [(128, 256), (256, 128)], ["R", "R"], "R"),
    "matmul-S0xR": ("matmul", [(128, 256), (256, 128)], ["S0", "R"], "S0"),
    "matmul-S1xS0": ("matmul", [(128, 256), (256, 128)], ["S1", "S0"], "P"),
}
# the gradients the CPU suite checks are pending sums: a replicated operand's, where the
# other operand is sharded along the dim its gradient sums over
PARTIAL_GRADS = {"rmsnorm-S0": 1, "matmul-S0xR": 1}


@contextlib.contextmanager
def step(what: str):
    """Fail the test saying which step of the DTensor path failed, with its error."""
    try:
        yield
    except Exception as e:
        pytest.fail(f"DTensor on a one-device mesh: {what} failed: {type(e).__name__}: {e}")


def placement(code: str):
    from torch.distributed.tensor import Partial, Replicate, Shard

    return {"R": Replicate(), "S0": Shard(0), "S1": Shard(1), "P": Partial()}[code]


@contextlib.contextmanager
def one_rank_group(backend: str, device_type: str):
    """A default process group of one rank over `backend` (a file store: the TPU machine's
    sandbox has no inet sockets, "Address family not supported by protocol"; a timeout), and
    the one-device mesh on it; destroyed at the end."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if dist.is_initialized():
        pytest.fail(f"a default process group ({dist.get_backend()}) is already initialised in this process")
    with tempfile.TemporaryDirectory() as tmp:
        store = f"file://{tmp}/store"
        with step(f"init_process_group(backend={backend!r}, rank=0, world_size=1, init_method={store!r})"):
            dist.init_process_group(backend, init_method=store, rank=0, world_size=1, timeout=GROUP_TIMEOUT)
        try:
            with step(f"init_device_mesh({device_type!r}, (1,)) on the {backend!r} group"):
                mesh = init_device_mesh(device_type, (1,))
            yield mesh
        finally:
            dist.destroy_process_group()


def local_dtensor(t: torch.Tensor, mesh, placement):
    """`t` as a DTensor on the one-device mesh, without a collective: on one device a shard is
    the whole tensor (`DTensor.from_local`, no run check). `distribute_tensor` broadcasts or
    scatters first, and on the chip that collective over torch_tpu's one-rank `tpu_dist` group
    aborted the process (the third chip run: "Fatal Python error: Aborted")."""
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(t, mesh, [placement], run_check=False)


def run_case(case: str, mesh, device: torch.device) -> dict[str, float]:
    """One case on `mesh` (over `device`): the op on DTensors against the op on the plain
    tensors, forward and every input's gradient; returns the largest differences."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    from tpu_kernels.kernels import FAMILIES

    family, shapes, ins, out_code = CASES[case]
    fam = FAMILIES[family]
    g = torch.Generator().manual_seed(0)
    host = [torch.randn(*s, generator=g) for s in shapes]
    plain = [t.to(device).requires_grad_(True) for t in host]
    with step(f"{case}: the plain call on {device.type} tensors"):
        want = fam.op(*plain, **fam.kwargs)
        grad_out = torch.randn(tuple(want.shape), generator=g)
        want_grads = torch.autograd.grad(want, plain, grad_out.to(device))

    dt = []
    for i, (t, code) in enumerate(zip(host, ins)):
        with step(f"{case}: DTensor.from_local(input {i}, [{placement(code)}])"):
            dt.append(local_dtensor(t.to(device), mesh, placement(code)).requires_grad_(True))
    with step(f"{case}: {family} on DTensors {[str(placement(c)) for c in ins]}"):
        got = fam.op(*dt, **fam.kwargs)
    assert isinstance(got, DTensor), f"{case}: expected a DTensor result, got {type(got).__name__}"
    assert got.placements == (placement(out_code),), f"{case}: output placements {got.placements}"
    with step(f"{case}: the backward on DTensors"):
        p = got.placements[0]
        grad_placements = [Replicate() if isinstance(p, Partial) else p]
        torch.autograd.backward(got, local_dtensor(grad_out.to(device), mesh, grad_placements[0]))
    with step(f"{case}: full_tensor() of the result and gradients"):
        full = got.full_tensor().detach()
        full_grads = [d.grad.full_tensor() for d in dt]
    for i, d in enumerate(dt):
        want_partial = PARTIAL_GRADS.get(case) == i
        assert isinstance(d.grad.placements[0], Partial) == want_partial, (case, i, d.grad.placements)

    diffs = {"forward": float((full - want.detach()).abs().max())}
    assert full.device.type == device.type and full.shape == want.shape, (case, full.device, full.shape)
    for i, (a, b) in enumerate(zip(full_grads, want_grads)):
        assert a.shape == b.shape, (case, i, a.shape, b.shape)
        diffs[f"grad_{i}"] = float((a - b).abs().max())
    return diffs


@pytest.fixture(scope="module")
def tpu_mesh():
    tpu = torch.device("tpu")
    # the runtime first: DeviceMesh then leaves the current device as it is (no set_device)
    torch.zeros(1, device=tpu).cpu()
    with one_rank_group(BACKEND, "tpu") as mesh:
        yield mesh


@pytest.mark.parametrize("case", list(CASES))
def test_shipped_op_on_dtensors_matches_the_plain_call(case, tpu_mesh, tpu, figures):
    diffs = run_case(case, tpu_mesh, tpu)
    figures.update(diffs)
    assert max(diffs.values()) <= ATOL, (case, diffs)
