"""TpuKernelsConverter on torchtitan's debug models: the converted Llama 3 and Qwen 3 train as
the stock models do in one process; and Llama 3 under torchtitan's own parallelize, in one
process with its activation checkpointing (full, selective) and compile (fullgraph: no graph
breaks), and on 2 gloo processes (FSDP2; TP with sequence parallel).

On CPU the stock model cannot train as it is: flex attention has no CPU backward
("FlexAttention does not support backward on CPU"). The stock side therefore runs flex's
semantics as plain torch math (`MathFlex`: F.scaled_dot_product_attention on the mask the
BlockMask stands for); `test_forward_matches_stock_flex` checks that mask against real flex,
forward, on packed documents. Set-up a CPU run needs (docs/torchtitan.md): torchtitan's
parallel_dims.device_type "cpu"; the BlockMask built by the uncompiled create_block_mask
(torchtitan compiles it, about 100 s of Inductor here, the same mask); FSDP's gradient-divide
override skipped (gloo has no PREMUL_SUM).
"""

from __future__ import annotations

import functools
import json
import time
import traceback
import warnings
from datetime import timedelta

import pytest

torchtitan = pytest.importorskip("torchtitan")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tests.helpers import process_time_limit_s, spawn_ranks  # noqa: E402

B, L, VOCAB, STEPS, LR = 2, 32, 2048, 5, 1e-3
# the debug model's first 2 of 6 layers: every layer is converted and parallelized alike,
# and the 2-process run stays within its time (imports alone take ~30 s per process here)
LAYERS = 2
# float32: the converted model differs from stock in its kernels' rounding only (float32
# statistics, Tokamax's attention and GLU): measured 9e-8 (Llama 3, one process), 4e-7
# (Qwen 3, one process) and 2e-7 (TP+SP), relative, after 5 AdamW steps.
LOSS_RTOL = 1e-5
# Time limits in process start-ups (tests/helpers.process_time_limit_s), so a loaded machine
# gets longer: the whole spawn (imports, 2 configurations x (stock, converted) x 5 steps) took
# about 4 start-ups here, so 12; a hung collective fails sooner, at the gloo timeout (about
# one and a half start-ups, at least 40 s).
PROCESS_STARTUPS = 12
GLOO_STARTUPS = 1.5
DIST_CONFIGS = ("fsdp2", "tp+sp")


def cpu_setup() -> None:
    """What a CPU run of torchtitan 0.3.0 needs (see the module docstring)."""
    import torchtitan.distributed.fsdp as titan_fsdp
    import torchtitan.distributed.parallel_dims as parallel_dims
    import torchtitan.models.common.attention as titan_attention
    from torch.nn.attention.flex_attention import create_block_mask

    torch.set_num_threads(1)  # the intra-op pool on this shared 2-core machine: 10x slower steps
    parallel_dims.device_type = "cpu"
    titan_attention._compiled_create_block_mask = create_block_mask
    titan_fsdp.disable_fsdp_gradient_division = lambda model: None


@pytest.fixture(scope="module", autouse=True)
def _cpu():
    import torchtitan.distributed.fsdp as titan_fsdp
    import torchtitan.models.common.attention as titan_attention

    saved = (titan_attention._compiled_create_block_mask, titan_fsdp.disable_fsdp_gradient_division)
    threads = torch.get_num_threads()
    cpu_setup()
    yield
    titan_attention._compiled_create_block_mask, titan_fsdp.disable_fsdp_gradient_division = saved
    torch.set_num_threads(threads)


def math_flex():
    """Flex attention's semantics in plain torch, for the stock model on CPU."""
    from torchtitan.models.common.attention import FlexAttention

    from tpu_kernels.integrations.torchtitan import dense_mask

    class MathFlex(FlexAttention):
        def forward(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks, scale=None, enable_gqa=False, **kwargs):
            q, k, v = (t.transpose(1, 2) for t in (q_BLNH, k_BLNH, v_BLNH))
            mask = dense_mask(attention_masks)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
            return out.transpose(1, 2)

    return MathFlex


def registry(model: str):
    if model == "llama3":
        from torchtitan.models.llama3 import model_registry, parallelize_llama
        from torchtitan.models.llama3.sharding import set_llama3_sharding_config as set_sharding

        return model_registry, parallelize_llama, set_sharding
    from torchtitan.models.qwen3 import model_registry, parallelize_qwen3
    from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config

    # no expert parallelism: the dense debug model has no experts
    return model_registry, parallelize_qwen3, functools.partial(set_qwen3_sharding_config, enable_ep=False)


def build(model: str, converted: bool, *, math_attention: bool = True, parallel=None):
    """The debug model (its first LAYERS layers), stock or converted, initialised from seed 0; `parallel`: (ParallelismConfig,
    ParallelDims, ac config, compile config) for torchtitan's parallelize."""
    from torchtitan.config import CompileConfig, TrainingConfig
    from torchtitan.models.common.attention import FlexAttention

    from tpu_kernels.integrations.torchtitan import TpuKernelsConverter

    model_registry, parallelize, set_sharding = registry(model)
    spec = model_registry("debugmodel", converters=[TpuKernelsConverter.Config()] if converted else None)
    cfg = spec.model
    cfg.layers = cfg.layers[:LAYERS]
    if parallel is not None:
        # what update_from_config does for the sharding (it also imports the trainer, whose
        # data loading needs packages the model does not)
        set_sharding(cfg, enable_sp=parallel[0].enable_sequence_parallel)
    with torch.device("meta"):
        m = cfg.build()
    if math_attention and not converted:
        for module in m.modules():
            if type(module) is FlexAttention:
                module.__class__ = math_flex()
    if parallel is not None:
        par, dims, ac, compile_config = parallel
        m = parallelize(
            m, parallel_dims=dims, training=TrainingConfig(mixed_precision_param="float32"),
            parallelism=par, compile_config=compile_config or CompileConfig(), ac_config=ac, dump_folder="/tmp",
        )  # fmt: skip
    m.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        m.init_weights(buffer_device=torch.device("cpu"))
    return m


def batch(seed: int = 1, batch_size: int = B):
    """Tokens and positions: row 1 packs two documents (positions restart at 12), so the
    mask is causal within documents."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (batch_size, L + 1), generator=g)
    positions = torch.arange(L).repeat(batch_size, 1)
    positions[1, 12:] -= 12
    return tokens, positions


def train(m, tokens, positions, *, tp: int = 1) -> torch.Tensor:
    opt = torch.optim.AdamW(m.parameters(), lr=LR)
    masks = m.get_attention_masks(positions)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits = m(tokens[:, :-1], positions, masks)
        if tp > 1:  # the LM head is column-parallel: each rank holds a slice of the vocabulary
            import torch.distributed.nn.functional as dist_nn

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # deprecated, but public
                logits = torch.cat(dist_nn.all_gather(logits.contiguous()), dim=-1)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        (loss / tp).backward()  # the gather's backward sums the ranks' (equal) losses' gradients
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


# ---- the conversion ------------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama3", "qwen3"])
def test_the_converter_swaps_norms_attention_and_feed_forward(model):
    from tpu_kernels.integrations.torchtitan import (
        TpuKernelsAttention,
        TpuKernelsConverter,
        TpuKernelsFeedForward,
        TpuKernelsRMSNorm,
    )

    stock, converted = build(model, False, math_attention=False), build(model, True)
    layer = converted.layers["0"]
    assert type(layer.attention_norm) is TpuKernelsRMSNorm and type(layer.ffn_norm) is TpuKernelsRMSNorm
    assert type(layer.feed_forward) is TpuKernelsFeedForward and layer.feed_forward._fused
    assert type(layer.attention.inner_attention) is TpuKernelsAttention
    assert type(converted.norm) is TpuKernelsRMSNorm
    if model == "qwen3":
        assert type(layer.attention.q_norm) is TpuKernelsRMSNorm  # Qwen 3's q/k norms too
    # the same parameters, names and values: only forward differs
    want = stock.state_dict()
    got = converted.state_dict()
    assert list(got) == list(want)
    assert all(torch.equal(got[k], want[k]) for k in want)

    converter = TpuKernelsConverter.Config().build()
    cfg = registry(model)[0]("debugmodel").model  # all 6 layers
    n_layers = len(cfg.layers)
    converter.convert(cfg)
    # per layer two norms (Qwen 3: and one qk_norm config, which builds q_norm and k_norm), and the final one
    norms = n_layers * (3 if model == "qwen3" else 2) + 1
    assert converter.swapped == {
        "TpuKernelsRMSNorm": norms, "TpuKernelsAttention": n_layers, "TpuKernelsFeedForward": n_layers
    }  # fmt: skip


@pytest.mark.parametrize("affine", [True, False], ids=["weight", "no-weight"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_rmsnorm_eps_none_means_what_torchtitans_norm_means(dtype, affine):
    """torchtitan's RMSNorm is nn.RMSNorm, whose eps=None is the epsilon of the dtype
    F.rms_norm computes in (float32's for 16-bit input, float64's for float64). Rows of mean
    square 1e-6, where eps decides the result: 1e-6 for eps would be 25% off, bfloat16's own
    epsilon (7.8e-3) 99% off."""
    from torchtitan.models.common.nn_modules import RMSNorm

    from tpu_kernels.integrations.torchtitan import TpuKernelsRMSNorm

    config = dict(normalized_shape=64, eps=None, elementwise_affine=affine)
    stock = RMSNorm(RMSNorm.Config(**config)).to(dtype)
    ours = TpuKernelsRMSNorm(TpuKernelsRMSNorm.Config(**config)).to(dtype)
    if affine:
        with torch.no_grad():
            stock.weight.copy_(torch.randn(64))
            ours.weight.copy_(stock.weight)
    x = (torch.randn(4, 8, 64) * 1e-3).to(dtype)
    with torch.no_grad():
        want, got = stock(x), ours(x)
    assert got.dtype == want.dtype == dtype
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("bias", [False, True], ids=["plain", "biased"])
def test_feed_forward_matches_stock_with_and_without_biased_projections(bias):
    """w1 and w3 fuse into Tokamax's GLU only when they are plain bias-free Linears (the GLU
    has no bias); with biases the stock forward runs: either way, stock's result."""
    from torchtitan.models.common.feed_forward import FeedForward
    from torchtitan.models.common.linear import Linear

    from tpu_kernels.integrations.torchtitan import TpuKernelsFeedForward

    def config(cls):
        return cls.Config(
            w1=Linear.Config(in_features=32, out_features=64, bias=bias),
            w2=Linear.Config(in_features=64, out_features=32),
            w3=Linear.Config(in_features=32, out_features=64, bias=bias),
        )

    stock, ours = FeedForward(config(FeedForward)), TpuKernelsFeedForward(config(TpuKernelsFeedForward))
    ours.load_state_dict(stock.state_dict())
    assert ours._fused is not bias
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), stock(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", [None, 0.3], ids=["default-scale", "scale-0.3"])
def test_attention_matches_stock_flex_with_a_scale_and_grouped_heads(monkeypatch, scale):
    """flex attention's `scale=` (and kv-heads fewer than q-heads) reach Tokamax's attention:
    against flex itself, forward, on a causal BlockMask."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from torchtitan.models.common.attention import FlexAttention

    from tpu_kernels.integrations.torchtitan import TpuKernelsAttention

    monkeypatch.setattr(FlexAttention, "_compiled_flex_attn", flex_attention)  # flex eager
    stock, ours = FlexAttention(FlexAttention.Config()), TpuKernelsAttention(TpuKernelsAttention.Config())
    mask = create_block_mask(lambda b, h, q, kv: q >= kv, 2, None, 16, 16, device="cpu")
    q = torch.randn(2, 16, 4, 8)
    k, v = torch.randn(2, 16, 2, 8), torch.randn(2, 16, 2, 8)
    kwargs = dict(attention_masks=mask, scale=scale, enable_gqa=True)
    with torch.no_grad():
        torch.testing.assert_close(ours(q, k, v, **kwargs), stock(q, k, v, **kwargs), rtol=1e-5, atol=1e-5)


def test_converter_options_and_what_it_leaves_alone():
    from torchtitan.models.common.feed_forward import FeedForward, SigmoidGatedFeedForward
    from torchtitan.models.common.nn_modules import RMSNorm
    from torchtitan.models.llama3 import model_registry

    from tpu_kernels.integrations.torchtitan import TpuKernelsConverter, convert

    spec = model_registry("debugmodel", converters=[TpuKernelsConverter.Config(norm=False, attention=False)])
    layer = spec.model.layers[0]
    assert type(layer.attention_norm) is RMSNorm.Config and type(layer.feed_forward) is not FeedForward.Config
    # a subclass (its own forward) is not swapped
    cfg = model_registry("debugmodel").model
    ff = cfg.layers[0].feed_forward
    cfg.layers[0].feed_forward = SigmoidGatedFeedForward.Config(w1=ff.w1, w2=ff.w2, w3=ff.w3, gate=ff.w1)
    assert convert(cfg)["TpuKernelsFeedForward"] == len(cfg.layers) - 1
    # Qwen 3's MoE layers: their norms and attention are swapped, the MoE (router, grouped
    # experts) is not
    from torchtitan.models.common.moe import MoE
    from torchtitan.models.qwen3 import model_registry as qwen3_registry

    moe = qwen3_registry("debugmodel_moe").model
    n = len(moe.layers)
    assert convert(moe) == {"TpuKernelsRMSNorm": 3 * n + 1, "TpuKernelsAttention": n}
    assert all(type(layer.moe) is MoE.Config for layer in moe.layers)
    with pytest.raises(ValueError, match="the root config is a RMSNorm.Config; convert a model config"):
        convert(RMSNorm.Config(normalized_shape=8))
    with pytest.raises(
        ValueError, match="Linear.Config has no RMSNorm, flex attention or SwiGLU feed-forward config"
    ):
        TpuKernelsConverter.Config().build().convert(model_registry("debugmodel").model.lm_head)


def test_forward_matches_stock_flex(monkeypatch):
    """Against real flex attention (forward: flex runs on CPU without gradients): the
    dense mask the converted attention uses is the BlockMask's, documents included."""
    from torch.nn.attention.flex_attention import flex_attention
    from torchtitan.models.common.attention import FlexAttention

    # flex eager (torchtitan's compiled flex: 70 s of Inductor autotuning here, the same result)
    monkeypatch.setattr(FlexAttention, "_compiled_flex_attn", flex_attention)
    stock, converted = build("llama3", False, math_attention=False), build("llama3", True)
    tokens, positions = batch()
    with torch.no_grad():
        want = stock(tokens[:, :-1], positions, stock.get_attention_masks(positions))
        got = converted(tokens[:, :-1], positions, converted.get_attention_masks(positions))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["llama3", "qwen3"])
def test_five_steps_match_stock_one_process(model):
    """Qwen 3 adds q/k norms (RMSNorms over head_dim, inside the attention block) to what
    Llama 3 swaps; its dense debug model, not the MoE one (the MoE layers stay stock)."""
    tokens, positions = batch()
    want = train(build(model, False), tokens, positions)
    got = train(build(model, True), tokens, positions)
    print(f"losses {want.tolist()}, largest relative difference {((got - want).abs() / want).max():.1e}")
    assert want[-1] < want[0] - 1  # it trains
    torch.testing.assert_close(got, want, rtol=LOSS_RTOL, atol=0)


# ---- activation checkpointing and compile, through torchtitan's parallelize ----------

# (model, AC policy, compile backend), as torchtitan's trainer config names them; ("selective",
# "aot_eager") is the trainer's default AC with compile on, which Qwen 3 (parallelize_qwen3)
# runs too. The backend is aot_eager, not inductor: Inductor's CPU code generation took 59 s
# for the stock model here (the converted model 12 s; the same losses), and what the converter
# has to survive is dynamo's tracing (fullgraph) and AOTAutograd's partitioning, which both
# backends share.
AC_COMPILE = (
    ("llama3", "full", None),
    ("llama3", "selective", None),
    ("llama3", "tpu_kernels_selective", None),
    ("llama3", None, "aot_eager"),
    ("llama3", "selective", "aot_eager"),
    ("qwen3", "selective", "aot_eager"),
)
# the converted Llama 3 forward's own ops, per transformer block, and their names in a dynamo graph
OPS_PER_BLOCK = {
    "tpu_kernels::rmsnorm": 2,
    "tokamax::dot_product_attention": 1,
    "tokamax::gated_linear_unit": 1,
}
GRAPH_NAMES = ("tpu_kernels.rmsnorm", "tokamax.dot_product_attention", "tokamax.gated_linear_unit")


@pytest.fixture(scope="module")
def one_rank():
    """A 1-process gloo group for torchtitan's parallelize, which always applies FSDP2 (at
    shard degree 1 a no-op all-gather that still installs its mixed-precision policy) and so
    needs a device mesh; and, afterwards, the global switches that AC and compile flip put back."""
    import torch._C._dynamo.eval_frame as eval_frame
    import torch.distributed as dist
    import torchtitan.distributed.compile as titan_compile

    dynamo = ("capture_scalar_outputs", "skip_fwd_side_effects_in_bwd_under_checkpoint")
    saved = {k: getattr(torch._dynamo.config, k) for k in dynamo}
    saved_regional = titan_compile._regional_inductor_enabled
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()
    for k, v in saved.items():
        setattr(torch._dynamo.config, k, v)
    titan_compile._regional_inductor_enabled = saved_regional
    eval_frame._set_lru_cache(True)  # AC turns dynamo's LRU cache off; True is torch's default
    torch._dynamo.reset()


class OpsSeen(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the tpu_kernels and Tokamax ops dispatched while it is on."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in ("tpu_kernels", "tokamax"):
            self.counts[func.name()] = self.counts.get(func.name(), 0) + 1
        return func(*args, **(kwargs or {}))


def recomputed(m, tokens, positions) -> dict:
    """The converted forward's ops that one backward runs again (activation checkpointing's
    recomputation), by name."""
    loss = m(tokens[:, :-1], positions, m.get_attention_masks(positions)).float().logsumexp(-1).mean()
    with OpsSeen() as seen:
        loss.backward()
    return {k: v for k, v in seen.counts.items() if k in OPS_PER_BLOCK}


class GraphCode:
    """The code of the graphs dynamo captures while it is on (torch._logging's graph_code)."""

    def __enter__(self):
        import logging

        from torch._dynamo.output_graph import graph_code_log

        self.text = []
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.text.append(record.getMessage())
        self.logger = graph_code_log
        torch._logging.set_logs(graph_code=True)
        self.logger.propagate = False  # to this handler only, not torch's stderr one
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        torch._logging.set_logs()  # the defaults (propagation too)

    def __str__(self):
        return "\n".join(self.text)


def _ac_compile(ac: str | None, backend: str | None):
    from torchtitan.config import CompileConfig, ParallelismConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    from tpu_kernels.integrations.torchtitan import TpuKernelsSelectiveAC

    par = ParallelismConfig()
    policies = {"full": FullAC, "selective": SelectiveAC, "tpu_kernels_selective": TpuKernelsSelectiveAC}
    ac_config = policies[ac].Config() if ac else None
    compile_config = CompileConfig(enable=True, backend=backend) if backend else CompileConfig()
    return par, ParallelDims.from_config(par, 1), ac_config, compile_config


@pytest.mark.parametrize(
    "model,ac,backend",
    [
        pytest.param(
            model, ac, b, marks=[pytest.mark.slow] if b else [], id=f"{model}-{ac or 'no'}-ac-{b or 'eager'}"
        )
        for model, ac, b in AC_COMPILE
    ],
)
def test_five_steps_match_stock_with_ac_and_compile(one_rank, model, ac, backend):
    """The debug model through torchtitan's parallelize (parallelize_llama, parallelize_qwen3)
    with its AC and compile configs (the path its trainer takes: AC wraps each block, then each
    block is compiled with fullgraph=True, so a graph break fails the compile): the same losses
    as stock under the same configs."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    counters = torch._dynamo.utils.counters
    tokens, positions = batch()
    losses, graph_code = {}, {}
    for converted in (False, True):
        torch._dynamo.reset()  # each model compiles afresh, within dynamo's recompile limit
        counters.clear()
        with GraphCode() as code:
            m = build(model, converted, parallel=_ac_compile(ac, backend))
            losses[converted] = train(m, tokens, positions)
        blocks = list(m.layers.values())
        assert all(isinstance(b, CheckpointWrapper) for b in blocks) == (ac is not None)
        if backend:  # every block compiled, in whole graphs
            assert all(b._compiled_call_impl is not None for b in blocks)
            assert not counters["graph_break"], dict(counters["graph_break"])
            assert counters["stats"]["unique_graphs"] >= 1
            graph_code[converted] = str(code)
    if backend:  # the converted blocks' graphs hold the tpu_kernels ops, not calls around them
        assert all(name in graph_code[True] for name in GRAPH_NAMES), graph_code[True][-2000:]
        assert not any(name in graph_code[False] for name in GRAPH_NAMES)
    elif ac:  # torchtitan's AC recomputes the converted ops in backward: its selective policy
        # saves flex attention's and SDPA's outputs, not Tokamax attention's, nor GLU's, which
        # TpuKernelsSelectiveAC saves (m: the converted model)
        saved = (
            ("tokamax::dot_product_attention", "tokamax::gated_linear_unit")
            if ac == "tpu_kernels_selective"
            else ()
        )
        want = {k: n * LAYERS for k, n in OPS_PER_BLOCK.items() if k not in saved}
        assert recomputed(m, tokens, positions) == want
    want, got = losses[False], losses[True]
    print(f"{model}, AC {ac}, compile {backend}: losses {want.tolist()}, largest relative difference "
          f"{((got - want).abs() / want).max():.1e}")  # fmt: skip
    assert want[-1] < want[0] - 1
    torch.testing.assert_close(got, want, rtol=LOSS_RTOL, atol=0)


# ---- torchtitan's parallelize on 2 gloo processes ------------------------------------


def _parallel(name: str, world: int):
    """(ParallelismConfig, ParallelDims, AC config, compile config) for torchtitan's parallelize."""
    from torchtitan.config import ParallelismConfig
    from torchtitan.distributed import ParallelDims

    if name == "tp+sp":
        par = ParallelismConfig(
            data_parallel_shard_degree=1, tensor_parallel_degree=world, enable_sequence_parallel=True
        )
    else:
        par = ParallelismConfig(data_parallel_shard_degree=world)
    return par, ParallelDims.from_config(par, world), None, None


def _worker(rank: int, world: int, port: int, out: str, gloo_timeout_s: float) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=gloo_timeout_s),
    )
    cpu_setup()
    results = {}
    try:
        for name in DIST_CONFIGS:
            t0 = time.perf_counter()
            try:
                parallel = _parallel(name, world)
                tokens, positions = batch(batch_size=B * world)
                tp = 1
                if name == "tp+sp":
                    tp = world  # every rank sees the whole batch
                else:  # data parallel: each rank its share of the batch
                    tokens, positions = (
                        tokens[rank * B : (rank + 1) * B],
                        positions[rank * B : (rank + 1) * B],
                    )
                losses = {}
                for converted in (False, True):
                    loss = train(build("llama3", converted, parallel=parallel), tokens, positions, tp=tp)
                    dist.all_reduce(loss, op=dist.ReduceOp.AVG)  # the whole batch's mean
                    losses[converted] = loss.tolist()
                results[name] = {"stock": losses[False], "converted": losses[True], "error": None}
            except Exception as e:  # recorded, so the other configurations still run
                results[name] = {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}
            results[name]["seconds"] = time.perf_counter() - t0
            dist.barrier()
        if rank == 0:
            with open(out, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def distributed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("torchtitan") / "results.json"
    spawn_ranks(
        _worker,
        2,
        str(out),
        process_time_limit_s(GLOO_STARTUPS, floor_s=40),
        timeout_s=process_time_limit_s(PROCESS_STARTUPS, floor_s=180),
    )
    return json.loads(out.read_text())


@pytest.mark.slow  # one spawn of 2 processes: ~90 s here at a load average of 8, ~45 s of it imports
@pytest.mark.parametrize("name", DIST_CONFIGS)
def test_five_steps_match_stock_under_parallelize(distributed, name):
    r = distributed[name]
    assert r["error"] is None, f"{name} failed ({r['seconds']:.0f} s):\n{r['error']}"
    want, got = torch.tensor(r["stock"]), torch.tensor(r["converted"])
    print(f"{name}: {r['seconds']:.0f} s, losses {r['stock']}, largest relative difference "
          f"{((got - want).abs() / want).max():.1e}")  # fmt: skip
    assert want[-1] < want[0] - 1
    torch.testing.assert_close(got, want, rtol=LOSS_RTOL, atol=0)
