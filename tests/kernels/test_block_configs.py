"""Each family's frozen block configuration (`pallas.Config`, kernels/_config.py): its fields are
the op's block parameters, its space is the op's `tune=` (what the tuner tries), and its
`default` is what the kernel runs with, read from the blocks of the traced kernels themselves."""

import dataclasses
import importlib

import jax
import jax.numpy as jnp
import pytest

from tpu_kernels.kernels import FAMILIES
from tpu_kernels.kernels._config import BlockConfig
from tpu_kernels.lowering import pallas_grid
from tpu_kernels.lowering_check import vmem


def _pallas(family: str):
    return importlib.import_module(f"tpu_kernels.kernels.{family}.pallas")


def _all_blocks(fn, *specs) -> list[list[tuple[int, ...]]]:
    """Each traced kernel's blocks, one per operand (its sizes, squeezed dimensions as 1)."""
    return [[tuple(pallas_grid.block_dims(bm)[0]) for bm in e.params["grid_mapping"].block_mappings]
            for e in vmem.traced_pallas_calls(fn, *specs)]


def _blocks(fn, *specs) -> list[tuple[int, ...]]:
    """Each traced kernel's first operand's block."""
    return [blocks[0] for blocks in _all_blocks(fn, *specs)]


def _spec(shape, dtype=jnp.bfloat16):
    return jax.ShapeDtypeStruct(shape, dtype)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_config_is_the_ops_block_parameters_and_its_space_the_tuners(family):
    config = _pallas(family).Config
    op = FAMILIES[family].op
    assert issubclass(config, BlockConfig) and dataclasses.is_dataclass(config)
    assert config.names() == op.tunables.names  # the op's block parameters, in its order
    assert op.tunables.space() == {n: [None, *config.SPACE[n]] for n in config.names()}  # the default first
    assert config().kwargs() == dict.fromkeys(config.names())
    with pytest.raises(dataclasses.FrozenInstanceError):
        config().__setattr__(config.names()[0], 128)
    assert config.space() is not config.space() and config.space() == {n: list(config.SPACE[n]) for n in config.names()}


@pytest.mark.parametrize("shape, dtype", [((113, 4096), jnp.float32), ((3000, 4096), jnp.bfloat16),
                                          ((4, 5, 14336), jnp.bfloat16)])
def test_rmsnorm_runs_its_configs_default(shape, dtype):
    p = _pallas("rmsnorm")
    x, w, r = _spec(shape, dtype), _spec(shape[-1:], dtype), _spec((*shape[:-1], 1), jnp.float32)
    (fwd,) = _blocks(lambda x, w: p.rmsnorm(x, w), x, w)
    (bwd,) = _blocks(lambda x, w, r, dy: p.rmsnorm_backward(x, w, r, dy), x, w, r, x)
    assert fwd[0] == p.Config.default(shape, dtype).block_rows
    assert bwd[0] == p.Config.default(shape, dtype, backward=True).block_rows


@pytest.mark.parametrize("shape, dtype", [((300, 128), jnp.float32), ((8192, 14336), jnp.bfloat16), ((1000,), jnp.float32)])
def test_scale_add_runs_its_configs_default_forward_and_backward(shape, dtype):
    p = _pallas("scale_add")

    def step(x, y, g):
        out, vjp = jax.vjp(lambda x, y: p.scale_add(x, y, alpha=0.5), x, y)
        return out, vjp(g)

    fwd, bwd = _blocks(step, _spec(shape, dtype), _spec(shape, dtype), _spec(shape, dtype))
    assert fwd[0] == p.Config.default(shape, dtype).block_rows
    assert bwd[0] == p.Config.default(shape, dtype, backward=True).block_rows


@pytest.mark.parametrize("shape, dtype", [((64, 4096), jnp.float32), ((882, 152064), jnp.bfloat16),
                                          ((8, 262144), jnp.float32), ((1024, 131072), jnp.float32)])
def test_softmax_runs_its_configs_default(shape, dtype):
    p = _pallas("softmax")
    fwd = _blocks(lambda x: p.softmax(x), _spec(shape, dtype))
    bwd = _blocks(lambda y, dy: p.softmax_backward(y, dy), _spec(shape, dtype), _spec(shape, dtype))
    for blocks, default in ((fwd, p.Config.default(shape, dtype)), (bwd, p.Config.default(shape, dtype, backward=True))):
        if default.block_rows is None:  # the column-tiled kernels
            assert all(b[1] < shape[1] for b in blocks), blocks
        else:
            assert blocks == [(default.block_rows, shape[1])]


def test_softmax_rows_too_wide_for_a_whole_row_block_have_no_default_and_tile_their_columns():
    p = _pallas("softmax")
    shape = (5, 200000)  # no multiple of 128: no column chunk, and a tile of whole rows does not fit
    assert p.Config.default(shape, jnp.float32).block_rows is None
    blocks = _blocks(lambda x: p.softmax(x), _spec(shape, jnp.float32))
    assert blocks and all(b[1] < shape[1] for b in blocks)  # column blocks, not whole rows


@pytest.mark.parametrize("shape, dtype", [((3000, 4096, 4096), jnp.bfloat16), ((8, 3584, 18944), jnp.bfloat16),
                                          ((4096, 3584, 4096), jnp.float32)])
def test_matmul_runs_its_configs_default(shape, dtype):
    p = _pallas("matmul")
    m, k, n = shape
    ((a, b, out),) = _all_blocks(lambda a, b: p.matmul(a, b), _spec((m, k), dtype), _spec((k, n), dtype))
    c = p.Config.default(shape, dtype)
    assert (a, b, out) == ((c.block_m, c.block_k), (c.block_k, c.block_n), (c.block_m, c.block_n))


@pytest.mark.parametrize("seq, causal", [(1000, True), (4352, True), (9472, True), (9472, False), (2944, True)])
def test_attention_runs_its_configs_default_forward_and_backward(seq, causal):
    p = _pallas("attention")
    q, k = _spec((1, 4, seq, 128)), _spec((1, 2, seq, 128))
    lse = _spec((1, 4, seq), jnp.float32)

    forward = p.Config.default(q.shape, k.shape, causal=causal)
    backward = p.Config.default(q.shape, k.shape, causal=causal, backward=True)
    (fwd,) = _all_blocks(lambda q, k, v: p.attention_out(q, k, v, causal=causal), q, k, k)
    assert (fwd[0][-2], fwd[1][-2]) == (forward.block_q, forward.block_k)  # q's rows, k's rows
    kernels = _all_blocks(
        lambda q, k, v, o, lse, do: p.attention_backward(q, k, v, o, lse, do, causal=causal), q, k, k, q, lse, q
    )
    plan = p._plan(q, k, causal, None, None, None, forward=False)
    # one kernel where the fused backward's VMEM need fits (dQ in the dK/dV kernel), else dK/dV then dQ
    assert len(kernels) == (1 if p._fused_fits(plan, 128, 2) else 2), (seq, len(kernels))
    for blocks in kernels:
        assert (blocks[0][-2], blocks[1][-2]) == (backward.block_q, backward.block_k)


@pytest.mark.parametrize("tokens, d, vocab", [(8192, 4096, 32000), (1192, 4096, 32000), (300, 512, 1000)])
def test_linear_cross_entropy_runs_its_configs_default_forward_and_backward(tokens, d, vocab):
    p = _pallas("linear_cross_entropy")
    hidden, weight = _spec((tokens, d)), _spec((vocab, d))
    labels = _spec((tokens,), jnp.int32)

    def step(h, w, y):
        loss, lse, dhidden = p.linear_cross_entropy(h, w, y)
        return p.linear_cross_entropy_backward(h, w, y, loss, lse, dhidden, jnp.ones_like(loss))

    blocks = _all_blocks(step, hidden, weight, labels)
    forward = p.Config.default(hidden.shape, weight.shape, hidden.dtype)
    backward = p.Config.default(hidden.shape, weight.shape, hidden.dtype, backward=True)
    fwd, bwd = blocks[0], blocks[-1]
    assert (fwd[0][0], fwd[1][0]) == (forward.block_t, forward.block_v)
    assert (bwd[0][0], bwd[1][0]) == (backward.block_t, backward.block_v)
