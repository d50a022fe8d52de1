"""The key: a digest of the traced program, which sees what the trace read, not the source."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from tests.registries import family_id, kernel_families
from tpu_kernels.runtime.cache import program

X = jax.ShapeDtypeStruct((16, 128), jnp.float32)


def _digest(f, *specs):
    # a new function each time, as each build makes: jit's own trace cache keys on it
    return program.digest(jax.jit(lambda *a: f(*a)).trace(*(specs or (X,))).jaxpr)


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _blocked(index_map):
    def f(x):
        spec = pl.BlockSpec((8, 128), index_map)
        return pl.pallas_call(
            _copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,), in_specs=[spec], out_specs=spec,
            interpret=True,
        )(x)  # fmt: skip

    return f


def test_equal_programs_have_equal_digests_whatever_their_source():
    assert _digest(lambda x: x * 2.0) == _digest(lambda y: y * 2.0)  # names do not count
    assert _digest(lambda x: x * 2.0) == _digest(jax.jit(lambda x: x * 2.0).__wrapped__)
    assert _digest(lambda x: x * 2.0) != _digest(lambda x: x * 3.0)  # literals do
    assert _digest(lambda x: x * 2.0) != _digest(lambda x: x + 2.0)
    assert _digest(lambda x: x * 2.0) != _digest(
        lambda x: x * 2.0, jax.ShapeDtypeStruct((16, 256), jnp.float32)
    )
    assert _digest(lambda x: x * 2.0) != _digest(
        lambda x: x * 2.0, jax.ShapeDtypeStruct((16, 128), jnp.bfloat16)
    )


def test_programs_that_differ_only_in_what_they_return_have_different_digests():
    """Both compute x * 2 and x * 3; one returns the first, the other the second. Every
    equation and type is alike: only the walk over the jaxpr's outputs tells them apart (a
    shared key would hand the second kernel the first's executable: 2.0 where 3.0 is due)."""

    def first(x):
        both = (x * 2.0, x * 3.0)
        return both[0]

    def second(x):
        both = (x * 2.0, x * 3.0)
        return both[1]

    def jaxpr(f):
        return jax.jit(f).trace(X).jaxpr.jaxpr

    assert [e.primitive for e in jaxpr(first).eqns] == [e.primitive for e in jaxpr(second).eqns]
    assert len(jaxpr(first).eqns) == 2  # neither trace dropped the unused product
    assert _digest(first) != _digest(second)
    # and nested: the same two bodies as inner jitted calls (a pjit equation holding each
    # jaxpr), whose outer programs return the inner call's one output alike
    assert _digest(lambda x: jax.jit(first)(x)) != _digest(lambda x: jax.jit(second)(x))


def test_run_time_state_the_trace_reads_is_in_the_digest():
    class Cfg:
        scale = 1.0

    def f(x):
        return x * Cfg.scale

    one = _digest(f)
    Cfg.scale = 5.0  # a value set at run time: no source fingerprint sees it
    assert _digest(f) != one
    Cfg.scale = 1.0
    assert _digest(f) == one


def test_pallas_index_maps_count_though_the_jaxprs_text_omits_them():
    """`str(jaxpr)` prints a GridMapping without its index maps: two kernels that read
    different blocks print alike. The walk reads every field of it."""
    a, b = _blocked(lambda i: (i, 0)), _blocked(lambda i: (1 - i, 0))
    assert str(jax.make_jaxpr(a)(np.zeros((16, 128), np.float32))) == str(
        jax.make_jaxpr(b)(np.zeros((16, 128), np.float32))
    )
    assert _digest(a) != _digest(b)
    assert _digest(a) == _digest(_blocked(lambda j: (j, 0)))


def test_constants_count_by_value():
    table = np.arange(128, dtype=np.float32)
    digests = set()
    for t in (table, table + 1):
        try:
            digests.add(_digest(lambda x, t=t: x + jnp.asarray(t)))
        except program.Undigestible:  # a constant JAX passes as an argument: refused, never mixed up
            return
    assert len(digests) == 2


def test_what_lowering_could_call_is_refused():
    def callback(x):
        return jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    with pytest.raises(program.Undigestible, match="effects|callable"):
        _digest(callback)


def test_derivative_rules_are_not_part_of_the_forward_program():
    @jax.custom_vjp
    def f(x):
        return x * 2.0

    f.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g * 2.0,))
    assert _digest(f) == _digest(f)  # the rules are Python functions: skipped, not refused
    assert _digest(jax.nn.relu) == _digest(jax.nn.relu)  # custom_jvp


@pytest.mark.parametrize("kind", ["custom_jvp", "custom_vjp"])
def test_a_custom_derivative_functions_body_is_part_of_the_program(kind):
    """Only the rules are skipped: the body lowering runs (`call_jaxpr`) counts, so two such
    functions that differ in their body (with the same rule) never share a key."""

    def make(scale):
        if kind == "custom_jvp":
            f = jax.custom_jvp(lambda x: x * scale)
            f.defjvp(lambda primals, tangents: (f(*primals), tangents[0]))
        else:
            f = jax.custom_vjp(lambda x: x * scale)
            f.defvjp(lambda x: (f(x), None), lambda _, g: (g,))
        return f

    assert _digest(make(2.0)) != _digest(make(3.0))
    assert _digest(make(2.0)) == _digest(make(2.0))


@pytest.mark.parametrize("family", kernel_families(), ids=family_id)
def test_the_shipped_kernels_are_digestible_and_stable(family):
    op = family.op
    [args, *_] = family.test_inputs().values()  # the first of the family's TEST shapes
    arrays = [jnp.asarray(a.numpy()) for a in args]
    first = program.digest(op.jax_function(**family.kwargs).trace(*arrays).jaxpr)
    assert first == program.digest(op.jax_function(**family.kwargs).trace(*arrays).jaxpr)


def test_plain_values():
    d = program.value_digest
    assert d((1, "a", 2.5, None)) == d((1, "a", 2.5, None)) != d((1, "a", 2.5000001, None))
    assert d(1) != d(1.0) != d(True)  # types count
    assert d({"b": 1, "a": 2}) == d({"a": 2, "b": 1})
    with pytest.raises(program.Undigestible, match="cannot read"):
        d(object())
    with pytest.raises(program.Undigestible, match="callable"):
        d(functools.partial(print))
