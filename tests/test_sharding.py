"""DTensor sharding rules (`sharding=`), on 2 real gloo processes, and their pure pieces here.

The 2-process cases all run in one spawn (process start, gloo set-up and JAX
compiles dominate: about 25 s for the eager cases here), each compared with
the same op on the full tensors in the worker, forward and backward; a rule
that says "local" must run with zero collectives (CommDebugMode).
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback

import jax
import pytest
import torch

from tests.helpers import process_time_limit_s, spawn_startup_s
from tpu_kernels import OpDefinitionError, rowwise, sharding, tpu_kernel

# A hang (a rank waiting on a collective the other never joins) fails at this limit, in process
# start-ups (tests/helpers.process_time_limit_s): each 2-process run below took 7-8 start-ups
# (205 s and 182 s against a 27 s start-up at load 6; about 25 s on a quiet machine), so 3x that.
# The fixed limits this replaces (240 s, 420 s) were hit at load 10 (issue 25).
STARTUPS = 24


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_on_2_processes(fn, timeout_s: float | None = None) -> None:
    """Run fn(rank, port) on 2 spawned processes; re-raise a worker's error; fail on a hang
    (after `timeout_s`, default STARTUPS process start-ups). fn must be importable by name (a
    module-level function): spawn pickles it."""
    import torch.multiprocessing as mp

    if timeout_s is None:
        timeout_s = process_time_limit_s(STARTUPS)

    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # inherited: no torch_tpu probing in workers
    ctx = mp.spawn(_ranked, args=(_free_port(), fn), nprocs=2, join=False)
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"2-process test did not finish in {timeout_s:.0f} s "
                    f"({STARTUPS} start-ups of {spawn_startup_s():.1f} s, measured this session)"
                )
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()


# ---- the worker ---------------------------------------------------------------------------


def _ranked(rank: int, port: int, fn) -> None:
    try:
        fn(rank, port)
    except BaseException:
        # spawn shows the child's traceback; prefix the rank so the two are told apart
        sys.stderr.write(f"rank {rank}:\n{traceback.format_exc()}")
        raise


def _check_close(what: str, got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5) -> None:
    g, w = got.float(), want.float()
    # equal values (infinities included: top_k's -inf for a short row) are no error
    err = torch.where(g == w, 0.0, (g - w).abs()).max().item() if want.numel() and g.shape == w.shape else 0.0
    if not (got.shape == want.shape and err <= atol):
        raise AssertionError(f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}, max error {err}")


def _case(
    mesh, name, op, full_args, placements, *, local: bool, compiled: bool = False, out_grad=None, atol=1e-5
):
    """op on DTensors (placements per arg, None: a plain non-tensor arg) vs op on full tensors.

    local=True: no collective may run; False: some must (DTensor redistributes). An op may
    return a tuple: every output is compared, and the backward runs from every output that
    has a gradient (none for an op without a backward)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    ref_args = [
        a.clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
        for a in full_args
    ]
    want = _as_list(op(*ref_args))
    diff = [w for w in want if w.requires_grad]
    grads = [torch.randn_like(w) for w in diff] if out_grad is None else [out_grad]
    if diff:
        torch.autograd.backward(diff, grads)
    d_args = [
        distribute_tensor(a, mesh, [p]).requires_grad_(a.is_floating_point()) if p is not None else a
        for a, p in zip(full_args, placements)
    ]

    def out_grads(outs: list) -> tuple[list, list]:
        """The outputs with a gradient, and their incoming gradients (distributing them
        scatters: done before counting the backward's collectives)."""
        outs = [o for o in outs if o.requires_grad]
        placed = [[Replicate() if isinstance(p, Partial) else p for p in o.placements] for o in outs]
        return outs, [distribute_tensor(g, mesh, p) for g, p in zip(grads, placed)]

    def backward(outs: list, dgrads: list) -> None:
        if outs:
            torch.autograd.backward(outs, dgrads)

    if compiled:
        # CommDebugMode is a dispatch mode torch.compile refuses; a compiled graph's
        # collectives are _c10d_functional ops in its forward and backward graphs.
        graphs: list[str] = []
        got = _as_list(torch.compile(op, fullgraph=True, backend=_recording_backend(graphs))(*d_args))
        backward(*out_grads(got))
        if len(graphs) != 2:
            raise AssertionError(f"{name}: expected a forward and a backward graph, got {len(graphs)}")
        if local == any("c10d" in text for text in graphs):
            raise AssertionError(f"{name}: expected local={local}, compiled graphs: {graphs}")
    else:
        with CommDebugMode() as fwd_comm:
            got = _as_list(op(*d_args))
        outs, dgrads = out_grads(got)
        with CommDebugMode() as bwd_comm:
            backward(outs, dgrads)
        if local == bool(fwd_comm.get_total_counts() + bwd_comm.get_total_counts()):
            raise AssertionError(
                f"{name}: expected local={local}, ran collectives {fwd_comm.get_comm_counts()} "
                f"forward, {bwd_comm.get_comm_counts()} backward"
            )
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, DTensor):
            raise AssertionError(f"{name}: expected a DTensor result, got {type(g)}")
        _check_close(f"{name} forward {i}", g.full_tensor(), w.detach(), atol)
    for i, (d, r) in enumerate(zip(d_args, ref_args)):
        if isinstance(r, torch.Tensor) and r.requires_grad and not (r.grad is None and d.grad is None):
            _check_close(f"{name} grad of arg {i}", d.grad.full_tensor(), r.grad, atol)
    return (got[0] if len(got) == 1 else tuple(got)), d_args


def _as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _recording_backend(graphs: list[str]):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def record(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=record, bw_compiler=record)


def _worker_cases(rank: int, port: int) -> None:
    # The kernels first: their rules are registered by the import hook once DTensor loads.
    from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax

    assert "torch.distributed.tensor" not in sys.modules, "the hook path is not exercised"
    # Helion imports DTensor itself: the hook registers the rules above then.
    from tpu_kernels.kernels.helion_ops import add_helion, matmul_helion, rmsnorm_helion, softmax_helion
    from tpu_kernels.runtime.sources.helion import set_helion_cpu_mode

    assert "torch.distributed.tensor" in sys.modules
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard

    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    try:
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)  # the same full tensors on both ranks
        x, x7 = torch.randn(8, 16), torch.randn(7, 16)  # 7 rows on 2 ranks: uneven shards
        x3 = torch.randn(4, 6, 16)
        w = torch.randn(16)
        S0, S1, R = Shard(0), Shard(1), Replicate()

        _case(mesh, "softmax S(0)", softmax, [x], [S0], local=True)
        _case(mesh, "softmax uneven S(0)", softmax, [x7], [S0], local=True)
        _case(mesh, "softmax 3-D S(1)", softmax, [x3], [S1], local=True)
        _case(mesh, "softmax R", softmax, [x], [R], local=True)
        # sharded along the reduced dim: DTensor gathers first (collectives), results still exact
        _case(mesh, "softmax S(1) of the reduced dim", softmax, [x], [S1], local=False)
        # rmsnorm: the weight gradient sums over the sharded rows (Partial)
        _, (_, dw) = _case(mesh, "rmsnorm S(0)", rmsnorm, [x7, w], [S0, R], local=True)
        assert isinstance(dw.grad.placements[0], Partial), dw.grad.placements
        _case(mesh, "rmsnorm 3-D S(1)", rmsnorm, [x3, w], [S1, R], local=True)
        # scale_add: pointwise with broadcasting; derived (flat-schema) backward
        _case(mesh, "scale_add S(1)", scale_add, [x, x.flip(0)], [S1, S1], local=True)
        _, (_, dy) = _case(mesh, "scale_add broadcast y", scale_add, [x7, w[None]], [S0, R], local=True)
        assert isinstance(dy.grad.placements[0], Partial), dy.grad.placements
        # matmul and its derived backward
        a, b = torch.randn(8, 6), torch.randn(6, 4)
        _, (_, db) = _case(mesh, "matmul S(0) x R", matmul, [a, b], [S0, R], local=True)
        assert isinstance(db.grad.placements[0], Partial)
        _, (da, _) = _case(mesh, "matmul R x S(1)", matmul, [a, b], [R, S1], local=True)
        assert isinstance(da.grad.placements[0], Partial)
        out, _ = _case(mesh, "matmul contraction", matmul, [a, b], [S1, S0], local=True)
        assert isinstance(out.placements[0], Partial), out.placements
        _case(mesh, "matmul uneven", matmul, [torch.randn(7, 6), b], [S0, R], local=True)

        # the Helion twins (run as eager torch on CPU: the rules, not Helion, are under test)
        set_helion_cpu_mode("eager")
        _, (_, dw) = _case(mesh, "rmsnorm_helion S(0)", rmsnorm_helion, [x7, w], [S0, R], local=True)
        assert isinstance(dw.grad.placements[0], Partial), dw.grad.placements
        _case(mesh, "softmax_helion S(0)", softmax_helion, [x7], [S0], local=True)
        _case(mesh, "add_helion broadcast y", add_helion, [x7, w[None]], [S0, R], local=True)
        _case(mesh, "matmul_helion R x S(1)", matmul_helion, [a, b], [R, S1], local=True)
        set_helion_cpu_mode("pallas")

        # torch.compile(fullgraph=True) traces the same rules
        def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return softmax(rmsnorm(x, w))

        _case(mesh, "compiled rmsnorm+softmax S(0)", block, [x7, w], [S0, R], local=True, compiled=True)
        _case(mesh, "compiled matmul R x S(1)", matmul, [a, b], [R, S1], local=True, compiled=True)
        _case(
            mesh, "compiled softmax S(1) of the reduced dim", softmax, [x], [S1], local=False, compiled=True
        )

        # a reduced dim given by a static: the strategy follows the static's value
        @tpu_kernel("test_sharding::softmax_axis", backward="vjp", sharding=rowwise("axis"))
        def softmax_axis(x: jax.Array, *, axis: int = -1) -> jax.Array:
            return jax.nn.softmax(x, axis=axis)

        _case(mesh, "rowwise('axis') axis=1, S(0)", lambda t: softmax_axis(t, axis=1), [x7], [S0], local=True)
        _case(
            mesh, "rowwise('axis') axis=0, S(0)", lambda t: softmax_axis(t, axis=0), [x7], [S0], local=False
        )

        # a user's function rule (docs/distributed.md's outer product), its backward derived
        def outer_rule(a, b):
            return [([R], [R, R]), ([S0], [S0, R]), ([S1], [R, S0])]

        @tpu_kernel("test_sharding::outer", backward="vjp", sharding=outer_rule)
        def outer(a: jax.Array, b: jax.Array) -> jax.Array:
            return jax.numpy.outer(a, b)

        u, v = torch.randn(7), torch.randn(5)
        _, (du, dv) = _case(mesh, "outer S(0) x R", outer, [u, v], [S0, R], local=True)
        assert du.grad.placements == (S0,) and isinstance(dv.grad.placements[0], Partial)
        _, (du, dv) = _case(mesh, "outer R x S(0)", outer, [u, v], [R, S0], local=True)
        assert isinstance(du.grad.placements[0], Partial) and dv.grad.placements == (S0,)

        # an op without a rule says how to declare one
        @tpu_kernel("test_sharding::no_rule")
        def no_rule(x: jax.Array) -> jax.Array:
            return x * 2

        from torch.distributed.tensor import distribute_tensor

        try:
            no_rule(distribute_tensor(x, mesh, [S0]))
        except NotImplementedError as e:
            msg = str(e)
            assert "test_sharding::no_rule" in msg and "sharding=" in msg, msg
        else:
            raise AssertionError("no_rule ran on DTensors without a sharding rule")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_dtensor_rules_on_2_processes():
    run_on_2_processes(_worker_cases)


def _derived_twin(name, kernel, backward_kernel=None, **options):
    """The shipped kernel again as `test_sharding_derived::<name>`, sharding="derived"."""
    op = tpu_kernel(f"test_sharding_derived::{name}", sharding="derived", **options)(kernel)
    if backward_kernel is not None:
        op.def_backward(backward_kernel)
    return op


def _specs(*shapes):
    return lambda: [(tuple(jax.ShapeDtypeStruct(s, jax.numpy.float32) for s in call), {}) for call in shapes]


def _worker_derived(rank: int, port: int) -> None:
    """sharding="derived" on DTensors: the derived rules of softmax, rmsnorm, scale_add and
    matmul give the declared rules' placements, locally, where they agree, and DTensor
    redistributes where the derived rule offers less (matmul's contraction)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    from tpu_kernels import ShardingRuleError
    from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax
    from tpu_kernels.kernels.matmul import pallas as mm_pallas
    from tpu_kernels.kernels.matmul import reference as mm_reference
    from tpu_kernels.kernels.rmsnorm import pallas as rms_pallas
    from tpu_kernels.kernels.scale_add import pallas as add_pallas
    from tpu_kernels.kernels.softmax import pallas as sm_pallas

    rows = ((7, 16),), ((4, 6, 16),)
    d_softmax = _derived_twin(
        "softmax", sm_pallas.softmax, sm_pallas.softmax_backward, examples=_specs(*rows)
    )
    d_softmax_c = _derived_twin(
        "softmax_c", sm_pallas.softmax, sm_pallas.softmax_backward, examples=_specs(*rows)
    )
    d_rmsnorm = _derived_twin(
        "rmsnorm",
        rms_pallas.rmsnorm,
        rms_pallas.rmsnorm_backward,
        outputs=("y", "inv_rms"),
        residuals=("inv_rms",),
        examples=_specs(((7, 16), (16,))),
    )
    d_scale_add = _derived_twin(
        "scale_add",
        add_pallas.scale_add,
        backward="vjp",
        examples=_specs(((7, 16), (1, 16)), ((8, 16), (8, 16))),
    )
    d_matmul = _derived_twin(
        "matmul", mm_pallas.matmul, reference=mm_reference.matmul_jax, examples=_specs(((8, 6), (6, 4)))
    )

    def bad_dim_rule(x):
        return [([Replicate()], [Replicate()]), ([Shard(2)], [Shard(2)])]

    @tpu_kernel("test_sharding_derived::bad_dim", sharding=bad_dim_rule)
    def bad_dim(x: jax.Array) -> jax.Array:
        return x * 2

    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    try:
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)  # the same full tensors on both ranks
        x, x7, x3, w = torch.randn(8, 16), torch.randn(7, 16), torch.randn(4, 6, 16), torch.randn(16)
        a, b = torch.randn(8, 6), torch.randn(6, 4)
        S0, S1, R = Shard(0), Shard(1), Replicate()

        def same(name, derived, declared, args, placements, local=True):
            got, d_args = _case(mesh, f"derived {name}", derived, args, placements, local=local)
            want, w_args = _case(mesh, f"declared {name}", declared, args, placements, local=True)
            for g, wt in zip(
                got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]
            ):
                assert g.placements == wt.placements, (name, g.placements, wt.placements)
            for da, wa in zip(d_args, w_args):
                if isinstance(da, torch.Tensor) and da.grad is not None:
                    assert da.grad.placements == wa.grad.placements, (
                        name,
                        da.grad.placements,
                        wa.grad.placements,
                    )

        same("softmax S(0) uneven", d_softmax, softmax, [x7], [S0])
        same("softmax 3-D S(1)", d_softmax, softmax, [x3], [S1])
        same("rmsnorm S(0)", d_rmsnorm, rmsnorm, [x7, w], [S0, R])  # weight's gradient Partial
        same("scale_add broadcast y", d_scale_add, scale_add, [x7, w[None]], [S0, R])  # y's gradient Partial
        same("scale_add S(0)", d_scale_add, scale_add, [x, x.flip(0)], [S0, S0])
        same("matmul S(0) x R", d_matmul, matmul, [a, b], [S0, R])
        same("matmul R x S(1)", d_matmul, matmul, [a, b], [R, S1])
        # the contraction: the declared rule's Partial; the derived one has none, so DTensor
        # gathers (collectives) and the result is still right
        out, _ = _case(mesh, "derived matmul contraction", d_matmul, [a, b], [S1, S0], local=False)
        assert not isinstance(out.placements[0], Partial), out.placements
        # first used under torch.compile: verified in a thread of its own, clear of the trace
        _case(mesh, "derived softmax compiled", d_softmax_c, [x7], [S0], local=True, compiled=True)

        # a rule that gives DTensor no usable strategy says which op, placements and rule
        # (DTensor re-raises it as a RuntimeError that starts with its message)
        try:
            bad_dim(distribute_tensor(x, mesh, [S0]))
        except RuntimeError as e:
            assert isinstance(e.__cause__, ShardingRuleError), repr(e)
            msg = str(e)
            assert msg.startswith(
                "test_sharding_derived::bad_dim: its sharding rule gives DTensor no usable"
            ), msg
            assert "given: x: Shard(0)" in msg and "x has 2 dims, so no dim 2 to shard" in msg, msg
        else:
            raise AssertionError("bad_dim ran with a rule that shards a dim its tensor lacks")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_derived_rules_on_2_processes():
    # each rank derives and simulates the derived rules at their examples on first use
    run_on_2_processes(_worker_derived)


# ---- here: the pure pieces ------------------------------------------------------------------


def test_sharding_option_is_checked():
    with pytest.raises(OpDefinitionError, match=r"test_sharding::bad: sharding='columns'"):

        @tpu_kernel("test_sharding::bad", sharding="columns")
        def bad(x: jax.Array) -> jax.Array:
            return x

    with pytest.raises(OpDefinitionError, match="rowwise: reduced dims"):
        rowwise(1.5)


def test_a_composite_backward_takes_no_rule():
    @tpu_kernel("test_sharding::twice", sharding="pointwise")
    def twice(x: jax.Array) -> jax.Array:
        return x * 2

    with pytest.raises(OpDefinitionError, match="composite backward takes no sharding="):
        twice.def_backward(lambda x, grad_out: grad_out * 2, composite=True, sharding="pointwise")


def test_named_rules():
    assert sharding.normalize("a::b", "pointwise") == sharding.pointwise()
    assert sharding.normalize("a::b", "rowwise") == rowwise(-1)
    assert rowwise("axis").reduced == ("axis",)


def test_derived_backward_has_a_flat_schema():
    @tpu_kernel("test_sharding::flat", backward="vjp", sharding="pointwise")
    def flat(x: jax.Array, idx: jax.Array, b: jax.Array | None = None, *, s: float = 2.0) -> jax.Array:
        y = x * s + idx.astype(x.dtype)
        return y if b is None else y + b

    assert flat.backward_op.schema == (
        "(Tensor grad_out, Tensor x, Tensor idx, Tensor? b=None, *, float s=2.0) -> (Tensor, Tensor, Tensor)"
    )
    x, b = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
    idx = torch.arange(5)
    flat(x, idx, b).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 2.0))
    torch.testing.assert_close(b.grad, torch.ones(5))
    x.grad = None
    flat(x, idx).sum().backward()  # absent Optional: its placeholder gradient is dropped
    torch.testing.assert_close(x.grad, torch.full((5,), 2.0))
    # the placeholder for a parameter without a gradient is an empty float32 tensor
    grads = flat.backward_op.overload(torch.ones(5), x.detach(), idx, None)
    assert [tuple(g.shape) for g in grads] == [(5,), (0,), (0,)]


def test_a_list_parameter_keeps_a_list_returning_backward():
    @tpu_kernel("test_sharding::list_sum", backward="vjp")
    def list_sum(xs: list[jax.Array]) -> jax.Array:
        return xs[0] + 2 * xs[1]

    assert list_sum.backward_op.schema == "(Tensor grad_out, Tensor[] xs) -> Tensor[]"
    xs = [torch.randn(3, requires_grad=True) for _ in range(2)]
    list_sum(xs).sum().backward()
    torch.testing.assert_close(xs[0].grad, torch.ones(3))
    torch.testing.assert_close(xs[1].grad, torch.full((3,), 2.0))
