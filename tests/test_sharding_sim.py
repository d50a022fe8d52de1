"""Sharding rules against their kernels, in one process: the local simulation
(`tpu_kernels.sharding.simulate`), the derived rules (`tpu_kernels.sharding.derive`,
`sharding="derived"`) and the errors that name the op, the placements and the rule.

Every shipped op and Helion twin (from the registry: the ops `tpu-kernels check`
finds in tpu_kernels.kernels and its Helion module) has its rule simulated at its
example calls on 2 and 3 shards, forward and backward; the Tokamax ops are in
tests/tokamax/test_sharding.py, the templates' in their generated tests. The 2-process
checks of the derived rules are in tests/test_sharding.py.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tests.helpers import needs_tokamax
from tests.registries import kernel_families
from tpu_kernels import OpDefinitionError, ShardingRuleError, helion_cpu_mode, sharding, testing, tpu_kernel
from tpu_kernels.kernels.matmul import pallas as mm_pallas
from tpu_kernels.kernels.matmul import reference as mm_reference
from tpu_kernels.kernels.rmsnorm import pallas as rms_pallas
from tpu_kernels.kernels.scale_add import pallas as add_pallas
from tpu_kernels.kernels.softmax import pallas as sm_pallas
from tpu_kernels.lowering_check.examples import forward_of
from tpu_kernels.sharding import simulate as sim
from tpu_kernels.sharding.derive import DEPENDENT, UNDECIDED, derive


def _family_ops(family) -> list:
    """A family's op and the ops its helion.py exports."""
    module = family.helion_module()
    return [family.op] + ([getattr(module, n) for n in module.__all__] if module is not None else [])


SHIPPED = sorted(
    (
        op
        for family in kernel_families()
        for op in _family_ops(family)
        if forward_of(op) is None  # backward ops are simulated with their forward
    ),
    key=lambda op: op.name,
)
SHIPPED_BY_NAME = {op.name: op for op in SHIPPED}


@pytest.fixture(scope="module", autouse=True)
def _dtensor():
    import torch.distributed.tensor  # noqa: F401  (registers the pending rules)


def _texts(op, args, kwargs=None, shards=2):
    """The sharded strategies of op's registered rule at this call, as text."""
    kwargs = kwargs or {}
    names = [p.name for p in op.signature.params[: len(args)]] + list(kwargs)
    with sharding.simulating():
        found = sim.strategies_at(op, sharding.strategies_of(op), args, kwargs, shards)
    return {
        sim.strategy_text(names, i, o)
        for o, i in found
        if any(p is not None and type(p).__name__ != "Replicate" for p in [*o, *i])
    }


# ---- the simulation -------------------------------------------------------------------------------


def test_shards_split_as_dtensor_splits():
    # DTensor's Shard: torch.chunk's pieces, then empty ones up to the mesh size
    for size in (0, 1, 2, 5, 7, 8, 256):
        for n in (2, 3, 4):
            lengths = [length for _, length in sim.chunks(size, n)]
            expected = [c.shape[0] for c in torch.arange(size).chunk(n)] if size else []
            assert lengths == expected + [0] * (n - len(expected)), (size, n)
            starts = [s for s, _ in sim.chunks(size, n)]
            assert starts == [min(sum(lengths[:i]), size) for i in range(n)]


@pytest.mark.parametrize("op", SHIPPED, ids=lambda op: op.name)
def test_every_shipped_rule_passes_the_simulation(op):
    # at the op's example calls, shrunk (128 rows: 43/43/42 on 3 shards, uneven), forward
    # and backward; the Helion twins as eager torch (the rules, not Helion, are under test)
    with helion_cpu_mode("eager"):
        report = testing.assert_sharding_rule(op)
    assert {n for _, _, n in report.checked} == {2, 3}
    backward = op.backward_op
    if isinstance(backward, type(op)):
        assert any(name == backward.name for name, _, _ in report.checked), report.checked


def test_uneven_shards_and_broadcast_operands():
    x7 = torch.randn(7, 16)  # 4 + 3 rows, 3 + 3 + 1
    report = testing.assert_sharding_rule(SHIPPED_BY_NAME["tpu_kernels::rmsnorm"], (x7, torch.randn(16)))
    dweight = "x: Shard(0), weight: Replicate(), inv_rms: Shard(0), grad_y: Shard(0) -> Shard(0), Partial()"
    assert ("tpu_kernels::rmsnorm_backward", dweight, 3) in report.checked
    y = torch.randn(1, 16)  # broadcast along the rows: Replicate there, its gradient Partial
    report = testing.assert_sharding_rule(SHIPPED_BY_NAME["tpu_kernels::scale_add"], (x7, y), {"alpha": 0.5})
    dy = "grad_out: Shard(0), x: Shard(0), y: Replicate() -> Shard(0), Partial()"
    assert ("tpu_kernels::scale_add_backward", dy, 3) in report.checked


def _wrong_rule_message(op, args, kwargs=None, shards=(2, 3)):
    with pytest.raises(ShardingRuleError) as info:
        testing.assert_sharding_rule(op, args, kwargs, shards=shards, backward=False)
    return str(info.value)


def test_a_pallas_op_that_declares_its_reduced_dim_shardable_fails():
    wrong = tpu_kernel("test_sharding_sim::softmax_pointwise", sharding="pointwise")(sm_pallas.softmax)
    msg = _wrong_rule_message(wrong, (torch.randn(7, 16),))
    assert "test_sharding_sim::softmax_pointwise: strategy x: Shard(1) -> Shard(1) on 2 shards" in msg, msg
    assert "the first at index (0, 0)" in msg and "sharded" in msg and "unsharded" in msg, msg
    assert "x: Shard(0) -> Shard(0)" not in msg.split("accepts")[0], msg  # the rows are right
    assert "rule accepts (besides all-Replicate): x: Shard(0) -> Shard(0); x: Shard(1) -> Shard(1)" in msg


def test_a_helion_op_that_declares_its_reduced_dim_shardable_fails():
    from tpu_kernels.kernels.softmax import helion_kernel

    wrong = tpu_kernel("test_sharding_sim::softmax_helion_pointwise", sharding="pointwise")(
        helion_kernel.softmax
    )
    with helion_cpu_mode("eager"):
        msg = _wrong_rule_message(wrong, (torch.randn(8, 16),))
    assert (
        "test_sharding_sim::softmax_helion_pointwise: strategy x: Shard(1) -> Shard(1) on 3 shards" in msg
    ), msg


@needs_tokamax
def test_a_tokamax_op_that_declares_its_normalised_dim_shardable_fails():
    # the mutant tests/tokamax/test_sharding.py's 2-process run once caught: layer norm
    # sharded on the dim it normalises
    from tpu_kernels.tokamax.normalization import op as norm
    from tpu_kernels.tokamax.placements import rule, shape
    from tpu_kernels.tokamax.wrap import tokamax_op

    @rule("x sharded on every dim (wrong: the last is normalised)")
    def every_dim(a):
        from torch.distributed.tensor import Shard

        return [([Shard(d)], {"x": Shard(d)}) for d in range(len(shape(a["x"])))]

    wrong = tokamax_op(
        "test_sharding_sim::layer_norm_every_dim",
        calls=norm._layer_norm,
        signature=norm.layer_norm,
        sharding=every_dim,
    )
    msg = _wrong_rule_message(wrong, (torch.randn(6, 16), torch.randn(16), torch.randn(16)), shards=(2,))
    assert "strategy x: Shard(1), weight: Replicate(), bias: Replicate() -> Shard(1) on 2 shards" in msg, msg
    assert "strategy x: Shard(0)" not in msg.split("accepts")[0], msg


def test_a_rule_that_breaks_the_backward_fails_there():
    # rows are right for the forward; the backward's Partial weight gradient is what the
    # derived backward rule gets right, and a hand-written backward rule wrong
    rms = tpu_kernel(
        "test_sharding_sim::rms", outputs=("y", "inv_rms"), residuals=("inv_rms",), sharding="rowwise"
    )(rms_pallas.rmsnorm)

    def replicated_dweight(x, weight, inv_rms, grad_y, **statics):
        from torch.distributed.tensor import Replicate, Shard

        r, s = Replicate(), Shard(0)
        return [([r, r], [r, r, r, r]), ([s, r], [s, r, s, s])]

    rms.def_backward(rms_pallas.rmsnorm_backward, sharding=replicated_dweight)
    with pytest.raises(
        ShardingRuleError,
        match=r"test_sharding_sim::rms_backward: strategy .* -> Shard\(0\), Replicate\(\) on 2 shards: output 1 \(Replicate\) on shard 0",
    ):
        testing.assert_sharding_rule(rms, (torch.randn(9, 16), torch.randn(16)), shards=(2,))


def test_an_op_without_a_rule_or_with_only_replicate_is_an_error():
    @tpu_kernel("test_sharding_sim::no_rule")
    def no_rule(x: jax.Array) -> jax.Array:
        return x * 2

    with pytest.raises(
        AssertionError,
        match=r"test_sharding_sim::no_rule: no sharded strategy was simulated \(test_sharding_sim::no_rule: no sharding rule\)",
    ):
        testing.assert_sharding_rule(no_rule, (torch.randn(4),))
    with pytest.raises(AssertionError, match="only all-Replicate"):  # a 1-d softmax: nothing to shard
        testing.assert_sharding_rule(SHIPPED_BY_NAME["tpu_kernels::softmax"], (torch.randn(9),))


# ---- rules that give DTensor nothing usable ---------------------------------------------------------


def _strategies(op, *args):
    from tpu_kernels import _compat

    specs = sim.specs_of(list(args), _compat.local_mesh(2))
    return sharding.strategies_of(op)(*specs)


def test_a_rule_with_no_strategy_or_a_bad_one_names_the_op_the_placements_and_the_rule():
    @tpu_kernel("test_sharding_sim::empty_rule", sharding=lambda x: [])
    def empty_rule(x: jax.Array) -> jax.Array:
        return x * 2

    with pytest.raises(ShardingRuleError) as info:
        _strategies(empty_rule, torch.randn(4, 3))
    msg = str(info.value)
    assert "test_sharding_sim::empty_rule: its sharding rule gives DTensor no usable strategy" in msg, msg
    assert (
        "it returned no strategy" in msg and "given: x: Replicate()" in msg and "accepts: nothing" in msg
    ), msg

    def shard_dim_2(x):
        from torch.distributed.tensor import Replicate, Shard

        return [([Replicate()], [Replicate()]), ([Shard(2)], [Shard(2)])]

    @tpu_kernel("test_sharding_sim::bad_dim", sharding=shard_dim_2)
    def bad_dim(x: jax.Array) -> jax.Array:
        return x * 2

    with pytest.raises(ShardingRuleError) as info:
        _strategies(bad_dim, torch.randn(4, 3))
    msg = str(info.value)
    assert "x: Shard(2) -> Shard(2): x has 2 dims, so no dim 2 to shard" in msg, msg
    assert "the rule accepts: x: Replicate() -> Replicate(); x: Shard(2) -> Shard(2)" in msg, msg

    def raises(x):
        raise KeyError("dim")

    @tpu_kernel("test_sharding_sim::raising_rule", sharding=raises)
    def raising_rule(x: jax.Array) -> jax.Array:
        return x * 2

    with pytest.raises(
        ShardingRuleError,
        match=r"raising_rule: its sharding rule \(raises\) raised KeyError: 'dim'\n  given: x: Replicate\(\)",
    ):
        _strategies(raising_rule, torch.randn(4, 3))


# ---- derivation ---------------------------------------------------------------------------------------


def _derived_twins():
    """The shipped softmax, rmsnorm, scale_add and matmul kernels again, with sharding="derived"."""
    S = jax.ShapeDtypeStruct
    f32 = jnp.float32

    def ex(*shapes):
        return lambda: [(tuple(S(s, f32) for s in shapes), {})]

    sm = tpu_kernel("test_derived::softmax", sharding="derived", examples=ex((5, 7, 16)))(sm_pallas.softmax)
    sm.def_backward(sm_pallas.softmax_backward)
    rn = tpu_kernel(
        "test_derived::rmsnorm",
        outputs=("y", "inv_rms"),
        residuals=("inv_rms",),
        sharding="derived",
        examples=ex((5, 7, 16), (16,)),
    )(rms_pallas.rmsnorm)
    rn.def_backward(rms_pallas.rmsnorm_backward)
    sa = tpu_kernel(
        "test_derived::scale_add", backward="vjp", sharding="derived", examples=ex((5, 7, 16), (16,))
    )(add_pallas.scale_add)
    mm = tpu_kernel(
        "test_derived::matmul",
        reference=mm_reference.matmul_jax,
        sharding="derived",
        examples=ex((64, 48), (48, 32)),
    )(mm_pallas.matmul)
    return {"softmax": sm, "rmsnorm": rn, "scale_add": sa, "matmul": mm}


DERIVED = _derived_twins()


@pytest.mark.parametrize("shape", [(7, 16), (5, 7, 16), (2, 3, 4, 16)])
def test_derived_reproduces_softmax_and_rmsnorm_forward_and_backward(shape):
    x, w = torch.randn(*shape), torch.randn(16)
    for name, args in (("softmax", (x,)), ("rmsnorm", (x, w))):
        derived, declared = DERIVED[name], SHIPPED_BY_NAME[f"tpu_kernels::{name}"]
        assert _texts(derived, args) == _texts(declared, args), name
        # the backward ops take the same arguments: the calls this forward call leads to
        [(bargs, bkwargs)] = sim.backward_calls(declared, declared.backward_op, [(args, {})])
        assert _texts(derived.backward_op, bargs, bkwargs) == _texts(declared.backward_op, bargs, bkwargs), (
            name
        )


def test_derived_scale_add_and_matmul_differ_from_the_declared_as_explained():
    # scale_add: its kernel's blocks span the last dim whole (a block is full rows), so the
    # derivation cannot see that columns are independent (they are: pointwise)
    x = torch.randn(5, 7, 16)
    for y in (torch.randn(16), torch.randn(5, 7, 16), torch.randn(5, 1, 16)):
        derived = _texts(DERIVED["scale_add"], (x, y))
        declared = _texts(SHIPPED_BY_NAME["tpu_kernels::scale_add"], (x, y))
        assert derived < declared
        assert all(s.startswith("x: Shard(2)") for s in declared - derived), declared - derived
    # matmul: K is walked by the "arbitrary" grid axis that accumulates; the derivation
    # cannot tell that accumulation is a sum, so it offers no Partial for a sharded K
    a, b = torch.randn(64, 48), torch.randn(48, 32)
    derived = _texts(DERIVED["matmul"], (a, b))
    declared = _texts(SHIPPED_BY_NAME["tpu_kernels::matmul"], (a, b))
    assert declared - derived == {"a: Shard(1), b: Shard(0) -> Partial()"}
    assert derived == {"a: Shard(0), b: Replicate() -> Shard(0)", "a: Replicate(), b: Shard(1) -> Shard(1)"}
    d = derive(DERIVED["matmul"], (a, b), {})
    assert [str(n) for n in d.notes] == [
        "a dim 1: dependent, the kernel _kernel: the 'arbitrary' grid axis 2 walks it (input 0 dim 1)",
        "b dim 0: dependent, the kernel _kernel: the 'arbitrary' grid axis 2 walks it (input 1 dim 0)",
    ]


def test_derived_rules_are_verified_at_their_examples_before_use():
    for op in DERIVED.values():
        for o in (op, op.backward_op):
            rule = sharding.rule_of(o)
            rule.verify()  # raises if a derived strategy disagreed with the kernel
    # a derived backward (vjp) gets the forward's derived strategies; an explicit one that
    # does not take the forward's arguments derives its own from its kernel
    assert sharding.rule_of(DERIVED["matmul"].backward_op) is sharding.rule_of(DERIVED["matmul"])
    own = sharding.rule_of(DERIVED["softmax"].backward_op)
    assert isinstance(own, sharding.Derived) and own is not sharding.rule_of(DERIVED["softmax"])


def test_a_derivation_the_simulation_refutes_is_never_used():
    # a parallel grid over row blocks, so the derivation calls rows independent; but the
    # body subtracts each block's mean: rows within a block depend on each other
    def centred(x: jax.Array) -> jax.Array:
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] - jnp.mean(x_ref[...], axis=0, keepdims=True)

        rows, cols = x.shape
        spec = pl.BlockSpec((8, cols), lambda i: (i, 0))
        return pl.pallas_call(
            body,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(pl.cdiv(rows, 8),),
            in_specs=[spec],
            out_specs=spec,
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(x)

    op = tpu_kernel(
        "test_derived::centred",
        sharding="derived",
        examples=lambda: [((jax.ShapeDtypeStruct((24, 16), jnp.float32),), {})],
    )(centred)
    assert _texts(op, (torch.randn(24, 16),)) == {"x: Shard(0) -> Shard(0)"}  # what the analysis reads
    rule = sharding.rule_of(op)
    with pytest.raises(
        ShardingRuleError, match=r"test_derived::centred: strategy x: Shard\(0\) -> Shard\(0\) on 2 shards"
    ):
        rule.verify()
    with pytest.raises(ShardingRuleError, match="test_derived::centred"):  # and again: the verdict is kept
        rule(*sim.specs_of([torch.randn(24, 16)], _local_mesh()))


def _local_mesh():
    from tpu_kernels import _compat

    return _compat.local_mesh(2)


def test_derivation_needs_examples_and_a_kernel_it_can_follow():
    with pytest.raises(
        OpDefinitionError, match=r"test_derived::no_examples: sharding='derived' needs examples="
    ):

        @tpu_kernel("test_derived::no_examples", sharding="derived")
        def no_examples(x: jax.Array) -> jax.Array:
            return x * 2

    # a Helion kernel traces to one opaque primitive: undecided, so a declaration is needed
    from tpu_kernels.kernels.softmax import helion_kernel

    helion = tpu_kernel(
        "test_derived::softmax_helion",
        sharding="derived",
        examples=lambda: [((jax.ShapeDtypeStruct((16, 128), jnp.float32),), {})],
    )(helion_kernel.softmax)
    with (
        helion_cpu_mode("eager"),
        pytest.raises(ShardingRuleError, match=r"cannot decide any dim .* declare the rule with sharding="),
    ):
        sharding.rule_of(helion).verify()
    d = derive(helion, (torch.randn(16, 128),), {})
    assert d.strategies[1:] == [] and {n.kind for n in d.notes} == {UNDECIDED}, d.notes


def _grid_kernel(semantics, body_reads_position=False, block=(8, 16), index=lambda i, j: (i, j)):
    def fn(x: jax.Array) -> jax.Array:
        def body(x_ref, o_ref):
            v = x_ref[...]
            if body_reads_position:
                v = v + pl.program_id(0).astype(v.dtype)
            o_ref[...] = v * 2

        spec = pl.BlockSpec(block, index)
        grid = (pl.cdiv(x.shape[0], block[0]), pl.cdiv(x.shape[1], block[1]))
        return pl.pallas_call(
            body,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=grid,
            in_specs=[spec],
            out_specs=spec,
            compiler_params=pltpu.CompilerParams(dimension_semantics=semantics),
        )(x)

    return fn


@pytest.mark.parametrize(
    ("semantics", "reads", "want", "why"),
    [
        (("parallel", "parallel"), False, {0, 1}, None),
        (("parallel", "arbitrary"), False, {0}, "the 'arbitrary' grid axis 1 walks it"),
        (("parallel", "parallel"), True, {1}, "reads grid axis 0's position"),
    ],
)
def test_what_the_grid_shows(semantics, reads, want, why):
    name = f"test_derived::grid_{'_'.join(semantics)}_{int(reads)}"
    op = tpu_kernel(name)(_grid_kernel(semantics, reads))
    d = derive(op, (jax.ShapeDtypeStruct((32, 48), jnp.float32),), {})
    assert {ins["x"].dim for _, ins in d.strategies[1:]} == want
    if why:
        assert [n.kind for n in d.notes] == [DEPENDENT] and why in d.notes[0].reason, d.notes


def test_an_unknown_primitive_leaves_its_dims_undecided():
    @tpu_kernel("test_derived::sorted_rows")
    def sorted_rows(x: jax.Array) -> jax.Array:
        return jnp.sort(x, axis=-1) * 2

    d = derive(sorted_rows, (jax.ShapeDtypeStruct((6, 5), jnp.float32),), {})
    assert d.strategies[1:] == []
    assert {str(n) for n in d.undecided} == {
        "x dim 0: undecided, it reaches `sort`, which the derivation does not analyse",
        "x dim 1: undecided, it reaches `sort`, which the derivation does not analyse",
    }


# ---- the command ---------------------------------------------------------------------------------------


def test_check_sharding_prints_the_derived_rule_and_fails_a_wrong_one(tmp_path, capsys):
    from tpu_kernels.cli import main

    module = tmp_path / "wrong_rule_kernels.py"
    module.write_text(
        "import jax\n"
        "from tpu_kernels import tpu_kernel\n"
        "from tpu_kernels.kernels.softmax import pallas\n\n"
        "def _examples():\n"
        "    return [((jax.ShapeDtypeStruct((24, 16), 'float32'),), {})]\n\n"
        "wrong = tpu_kernel('test_check_sharding::wrong', sharding='pointwise', examples=_examples)(pallas.softmax)\n"
    )
    assert main(["check", "--sharding", str(module)]) == 1
    out = capsys.readouterr().out
    assert "FAILED   test_check_sharding::wrong  rule pointwise:" in out, out
    assert (
        "derived: x: Shard(0) -> Shard(0)" in out and "the rule also offers: x: Shard(1) -> Shard(1)" in out
    ), out
    assert "not derived: x dim 1: dependent, the kernel _fwd_kernel: a block spans it whole" in out, out
    assert (
        "error (sharding): test_check_sharding::wrong: strategy x: Shard(1) -> Shard(1) on 2 shards" in out
    ), out


SMALL_SOFTMAX = (
    "import jax\n"
    "import torch\n"
    "from tpu_kernels import tpu_kernel\n\n"
    "def _examples():\n"
    "    x = torch.randn(4, 8192, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)\n"
    "    return [((x,), {})]\n\n"
    "@tpu_kernel('test_small_softmax::wrong', sharding='pointwise', examples=_examples)\n"
    "def wrong(x: jax.Array) -> jax.Array:\n"
    "    return jax.nn.softmax(x, axis=-1)\n\n"
    "@tpu_kernel('test_small_softmax::right', sharding='rowwise', examples=_examples)\n"
    "def right(x: jax.Array) -> jax.Array:\n"
    "    return jax.nn.softmax(x, axis=-1)\n"
)


def test_a_wrong_rule_on_outputs_far_below_one_fails_and_the_right_one_passes(tmp_path, capsys):
    # A softmax over 8192 bfloat16 columns: probabilities of about 1e-4, so bfloat16's atol
    # (8e-3, sized for values of about 1) passed the wrong strategy's doubled values (exit 0).
    from tpu_kernels.cli import main

    module = tmp_path / "small_softmax_kernels.py"
    module.write_text(SMALL_SOFTMAX)
    assert main(["check", "--sharding", str(module), "--filter", "wrong"]) == 1
    out = capsys.readouterr().out
    assert "FAILED   test_small_softmax::wrong  rule pointwise: 4 strategy runs simulated, 2 wrong" in out, (
        out
    )
    for n in (2, 3):
        line = next(
            (line for line in out.splitlines() if f"strategy x: Shard(1) -> Shard(1) on {n} shards" in line),
            "",
        )
        assert "error (sharding): test_small_softmax::wrong: " in line, out
        assert re.search(
            r"output 0 \(Shard\(1\)\): \d+ of 32768 elements differ; the first at index", line
        ), line
        far = re.search(r"the farthest at index \(\d+, \d+\): off by \S+, (\S+) times the \S+ allowed", line)
        assert far and float(far.group(1)) > 10, line  # about the values themselves, not rounding
    assert "x: Shard(0) -> Shard(0) on" not in out, out  # the rows are right
    assert main(["check", "--sharding", str(module), "--filter", "right"]) == 0
    out = capsys.readouterr().out
    assert (
        "ok       test_small_softmax::right  rule rowwise(-1,): 2 strategy runs simulated, 0 wrong" in out
    ), out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_comparison_is_relative_to_the_outputs_own_size(dtype):
    # seeded; the sizes span 1e-6..1e2: a factor of 2 is wrong at every size, one ulp is not
    gen = torch.Generator().manual_seed(0)
    for size in (1e-6, 1e-3, 1.0, 1e2):
        want = (torch.rand(64, generator=gen, dtype=torch.float64) + 0.5).mul(size).to(dtype)
        ulp = torch.finfo(dtype).eps * want.abs().to(torch.float64)
        assert sim.mismatch((want.to(torch.float64) + ulp).to(dtype), want) is None, (dtype, size)
        assert sim.mismatch(want * 2, want) is not None, (dtype, size)
        # an element near zero in an output of unit size (cancellation) may err by the output's rounding
        near_zero = want.clone()
        near_zero[0] = 0
        off = near_zero.to(torch.float64)
        off[0] = torch.finfo(dtype).eps * size
        assert sim.mismatch(off.to(dtype), near_zero) is None, (dtype, size)


def test_an_op_that_mutates_its_arguments_is_reported_skipped_not_ok():
    from tpu_kernels.lowering_check.sharding import check_sharding

    def rows(acc, x):
        from torch.distributed.tensor import Replicate, Shard

        return [([], [Replicate(), Replicate()]), ([], [Shard(0), Shard(0)])]

    @tpu_kernel(
        "test_sharding_sim::add_",
        mutates_args=("acc",),
        sharding=rows,
        examples=lambda: [((torch.randn(4, 8), torch.randn(4, 8)), {})],
    )
    def add_(acc: jax.Array, x: jax.Array) -> None:
        return acc + x

    report = check_sharding(add_)
    assert (report.status, report.checked) == ("skipped", 0), report
    assert report.reason == "test_sharding_sim::add_: mutates its arguments (not simulated)", report
