"""The measured figures in README.md and docs/performance.md, rendered from bench/reports/.

`python bench/record.py` measures and writes the records (the main job's report,
`bench/reports/<device>.json`, and one file per script that times fresh processes);
`python -m tpu_kernels.docs_tables` rewrites the pages' generated regions, calling the
functions here (its `GENERATORS`), and `tests/test_docs_tables.py` fails when a page
differs from what its records give. A figure on those pages is therefore one a record
holds, with a line naming the command, the machine, its load and the commit.

The scripts' own table code renders their figures (bench/startup.py, varlen.py,
generate.py, overhead.py, dispatch_modes.py), so a page and the script's printout cannot
disagree. Like docs_tables,
not imported by `tpu_kernels`: it imports the benchmark scripts and the kernels.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
REPORTS = BENCH / "reports"
RECORD = "python bench/record.py"
DEVICE = "cpu"  # the records the pages show: the main job on a CPU (bench/reports/cpu.json)


class MissingRecord(FileNotFoundError):
    """A page shows a record that bench/reports/ does not hold."""


def _read(name: str) -> dict:
    path = REPORTS / f"{name}.json"
    if not path.is_file():
        raise MissingRecord(f"docs_perf: no {path.relative_to(ROOT)}; run `{RECORD} {name}` to measure it")
    return json.loads(path.read_text())


def main_report(device: str = DEVICE):
    """The main job's report (`tpu-kernels bench` with its defaults) on `device`."""
    from tpu_kernels.bench.results import Report

    path = REPORTS / f"{device}.json"
    if not path.is_file():
        raise MissingRecord(f"docs_perf: no {path.relative_to(ROOT)}; run `{RECORD} main` on a {device}")
    return Report.read_json(path)


@cache
def script(name: str) -> ModuleType:
    """bench/<name>.py, imported (its folder on sys.path: the scripts import `_child`). A
    script some module of this process already ran (`import overhead`, or the harness's
    import of a suite) is that module: a script that registers ops at import (overhead.py,
    dispatch_modes.py) must run once per process, since op names are global. Otherwise a
    benchmark suite is imported as the harness imports it, for the same reason."""
    path = BENCH / f"{name}.py"
    loaded = _loaded_from(path)
    if loaded is not None:
        return loaded
    if "def benchmarks(" in path.read_text():
        from tpu_kernels.bench.discover import import_suite

        return import_suite(path)
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"tpu_kernels_bench_script_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _loaded_from(path: Path) -> ModuleType | None:
    """A module of this process that was run from the file at `path`, if any."""
    target = path.resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and file.endswith(path.name) and Path(file).resolve() == target:
            return module
    return None


# ---- the line under every table ---------------------------------------------------------------


def _machine(env: dict) -> str:
    load = env.get("load_average")
    load_text = f", load average {load[0]:.1f} when it began" if load else ""
    return f"{env.get('cpu_count', '?')} CPU cores{load_text}"


def provenance(command: str, env: dict, device_name: str | None = None) -> str:
    """Where a record comes from: the command, the machine and its load, the commit (which says
    when; a page carries no dates of its own)."""
    where = f"{device_name}, " if device_name else ""
    commit = (env.get("git_commit") or "unknown")[:10]
    packages = env.get("packages", {})
    versions = ", ".join(f"{p} {packages[p]}" for p in ("torch", "jax") if p in packages)
    return (
        f"_Measured by `{command}` on {where}{_machine(env)}; tpu_kernels {commit}, {versions}. "
        f"Regenerate: `{RECORD}`, then `python -m tpu_kernels.docs_tables`._"
    )


def _main_provenance(report) -> str:
    return provenance("tpu-kernels bench", report.environment, report.device.get("name"))


def _script_provenance(record: dict) -> str:
    return provenance(record["command"], record["environment"])


# ---- the main job -----------------------------------------------------------------------------


def _fmt(seconds: float | None) -> str:
    from tpu_kernels.bench.console import fmt_time

    return fmt_time(seconds)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _checked(report) -> tuple[int, list[str]]:
    """(candidate results checked, those that were wrong or failed: 'benchmark point candidate')."""
    checked, bad = 0, []
    for r in report.results:
        for c in r.candidates:
            if c.check is None and not c.error:
                continue
            checked += 1
            if c.error or not c.check["passed"]:
                bad.append(f"{r.benchmark} {r.point_id} {c.name}")
    return checked, bad


def _families() -> list[str]:
    from tpu_kernels.kernels import FAMILIES

    return [f.op.short_name for f in FAMILIES.values()]


def _bridge_ratios(report) -> list[float]:
    """tpu_kernels' median over the jax candidate's (the same kernel called in JAX), every
    point of the shipped kernels' benchmarks."""
    names = set(_families())
    out = []
    for r in report.results:
        tk, jx = r.candidate("tpu_kernels"), r.candidate("jax")
        if r.benchmark in names and tk and jx and tk.median and jx.median:
            out.append(tk.median / jx.median)
    return out


def _tuned_speedups(report) -> list[float]:
    """The tuning suite's tuned candidate over the declared default, per point (bench/tuning.py)."""
    out = []
    for r in report.results:
        tuned = r.candidate("tuned") if r.benchmark.startswith("tuning_") else None
        if tuned is not None and tuned.speedup:
            out.append(tuned.speedup)
    return out


def tuning_table() -> str:
    """The tuning suite's points: the chosen config, the declared default's and torch's times."""
    report = main_report()
    lines = [
        "| benchmark | point | tuned (chosen) | default (declared) | torch | tuned over default |",
        "|---|---|---|---|---|---|",
    ]
    for r in report.results:
        if not r.benchmark.startswith("tuning_"):
            continue
        tuned, default, torch_ = r.candidate("tuned"), r.candidate("default"), r.candidate("torch")
        lines.append(
            f"| {r.benchmark} | {r.point_id} | {_fmt(tuned.median)} ({tuned.implementation}) | "
            f"{_fmt(default.median)} ({default.implementation}) | {_fmt(torch_.median if torch_ else None)} | "
            f"{'-' if tuned.speedup is None else f'{tuned.speedup:.2f}x'} |"
        )
    return "\n".join(lines) + f"\n\n{_main_provenance(report)}\n"


def _overhead(report) -> dict[str, float | None]:
    [point] = [r for r in report.results if r.benchmark == "overhead"] or [None]
    if point is None:
        return {}
    return {c.name: c.median for c in point.candidates}


def _minutes(seconds: float) -> str:
    """A run's length to a tenth of a minute (plan.duration rounds up to whole minutes, right for
    an estimate, too coarse for a measured figure)."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _bench_sentence(report) -> str:
    """The main job's size and time: its wall time, and its CPU time where a busy machine
    stretched the wall time (the run got less than one core's worth on average)."""
    wall, cpu = report.wall_s or 0.0, report.cpu_s
    took = f"**{_minutes(wall)}**"
    if cpu and cpu < wall:
        took += f" on a shared machine (**{_minutes(cpu)}** of CPU time)"
    benchmarks = len({r.benchmark for r in report.results})
    return (
        f"`bash scripts/bench` took {took} for {len(report.results)} points of {benchmarks} benchmarks "
        "at the CPU's reduced sizes"
    )


def bench_time() -> str:
    """How long the two commands took on a CPU once set up, for README's commands."""
    report = main_report()
    lines = [
        f"On a {report.environment.get('cpu_count', '?')}-core CPU, once set up, {_bench_sentence(report)}"
    ]
    tests = REPORTS / "tests.json"
    if tests.is_file():
        record = json.loads(tests.read_text())
        lines.append(f"`bash scripts/test` **{_minutes(record['wall_s'])}** ({record['figures']['summary']})")
    else:
        lines.append(f"`bash scripts/test` has no record yet (`{RECORD} tests` makes one)")
    return "; ".join(lines) + "; [how they were measured](docs/performance.md).\n"


def headline() -> str:
    """README's table: a few figures from the records, each with the command that measures it."""
    report = main_report()
    lines = ["| on a CPU (Pallas kernels in JAX's interpreter) | figure | measured by |", "|---|---|---|"]
    over = _overhead(report)
    direct = over.get("jax direct")
    if direct and over.get("tpu_kernels, same tensors") and over.get("naive bridge"):
        added, naive = over["tpu_kernels, same tensors"] - direct, over["naive bridge"] - direct
        lines.append(
            f"| time a call from torch adds to the jitted JAX call (2-input add, same tensors) | "
            f"+{_fmt(added)} (a naive DLPack `custom_op`: +{_fmt(naive)}) | `tpu-kernels bench overhead` |"
        )
    ratios = _bridge_ratios(report)
    if ratios:
        lines.append(
            f"| shipped kernels called from torch, over the same kernel called in JAX | median "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} points) | "
            "`tpu-kernels bench kernels` |"
        )
    tuned = _tuned_speedups(report)
    if tuned:
        lines.append(
            f"| softmax at its autotuned block size, over its declared default | "
            f"{min(tuned):.2f}-{max(tuned):.2f}x over {len(tuned)} points | `tpu-kernels bench tuning` |"
        )
    checked, bad = _checked(report)
    lines.append(
        f"| results within their dtype's error bound of a float64 reference | {checked - len(bad)} of {checked} "
        "| `bash scripts/bench` |"
    )
    startup = _read("startup")["figures"]
    warm = [
        statistics.median(r["first_call"] for r in runs["warm"])
        / statistics.median(r["first_call"] for r in runs["cold"])
        for runs in startup.values()
    ]
    lines.append(
        f"| a fresh process's first call with a warm kernel cache, against a cold one | "
        f"{min(warm):.0%}-{max(warm):.0%} | `python bench/startup.py` |"
    )
    varlen = _read("varlen")["figures"]
    runs = varlen["runs"]
    lines.append(
        f"| executables for {len(varlen['lengths'])} random lengths (rmsnorm): exact shapes, then buckets | "
        f"{runs['exact'][0]['executables']}, then {runs['buckets'][0]['executables']} | `python bench/varlen.py` |"
    )
    return "\n".join(lines) + "\n"


def kernels_table() -> str:
    """Each shipped kernel family's points: every candidate's median, and the bridge's share."""
    report = main_report()
    names = set(_families())
    columns = ["tpu_kernels", "jax", "helion", "torch", "torch.compile"]
    lines = [
        "| benchmark | point | " + " | ".join(columns) + " | tpu_kernels / jax | correct |",
        "|---|---|" + "---|" * (len(columns) + 2),
    ]
    for r in report.results:
        if r.benchmark not in names:
            continue
        cells = []
        for name in columns:
            c = r.candidate(name)
            cells.append("error" if c is not None and c.error else _fmt(c.median if c else None))
        tk, jx = r.candidate("tpu_kernels"), r.candidate("jax")
        ok = all(c.check and c.check["passed"] for c in r.candidates if not c.error)
        lines.append(
            f"| {r.benchmark} | {r.point_id} | " + " | ".join(cells) + f" | "
            f"{_ratio(tk and tk.median, jx and jx.median)} | {'ok' if ok else 'WRONG'} |"
        )
    return "\n".join(lines) + f"\n\n{_main_provenance(report)}\n"


def tokamax_table() -> str:
    """Each Tokamax op's points: the op (its implementation) against torch and torch.compile."""
    report = main_report()
    lines = [
        "| benchmark | point | tokamax (implementation) | torch | torch.compile | speed-up over torch | correct |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.results:
        if not r.benchmark.startswith("tokamax_"):
            continue
        tk, torch_, compiled = r.candidate("tokamax"), r.candidate("torch"), r.candidate("torch.compile")
        ok = all(c.check and c.check["passed"] for c in r.candidates if not c.error)
        lines.append(
            f"| {r.benchmark} | {r.point_id} | {_fmt(tk.median)} ({tk.implementation}) | "
            f"{_fmt(torch_.median if torch_ else None)} | {_fmt(compiled.median if compiled else None)} | "
            f"{'-' if tk.speedup is None else f'{tk.speedup:.2f}x'} | {'ok' if ok else 'WRONG'} |"
        )
    return "\n".join(lines) + f"\n\n{_main_provenance(report)}\n"


def overhead_table() -> str:
    """The harness's overhead benchmark: each path's time per call and what it adds to the direct call."""
    report = main_report()
    over = _overhead(report)
    direct = over.get("jax direct")
    lines = ["| path | per call | over the direct call |", "|---|---|---|"]
    for name, median in over.items():
        extra = "" if name == "jax direct" or not (median and direct) else f"+{_fmt(median - direct)}"
        lines.append(f"| {name} | {_fmt(median)} | {extra} |")
    return "\n".join(lines) + f"\n\n{_main_provenance(report)}\n"


def run_summary() -> str:
    """The main job as recorded: its size, its wall time and every result's verdict."""
    report = main_report()
    checked, bad = _checked(report)
    verdict = "every one within its bound" if not bad else f"wrong or failed: {', '.join(bad)}"
    cpu = f" ({_minutes(report.cpu_s)} of CPU time)" if report.cpu_s else ""
    return (
        f"{len(report.results)} points of {len({r.benchmark for r in report.results})} benchmarks "
        f"({report.settings.get('sweep', '?')} sizes, {report.settings.get('rounds')} rounds) in "
        f"{_minutes(report.wall_s or 0)}{cpu}; {checked} candidate results checked against float64, "
        f"{verdict}.\n\n{_main_provenance(report)}\n"
    )


# ---- the scripts that time fresh processes -----------------------------------------------------


def startup_table() -> str:
    record = _read("startup")
    module = script("startup")
    figures = record["figures"]
    lines = [module.table(figures), "", *(f"- {g}" for g in module.goals(figures))]
    return "\n".join(lines) + f"\n\n{_script_provenance(record)}\n"


def chip_tables() -> str:
    """The TPU v5e records (bench/reports/chip_v5e.json, chip_v5e_tune.json): summary, before
    and after, the grid, float32 precision and the decoder layer."""
    from tpu_kernels.chip import report

    record, tune = _read("chip_v5e"), _read("chip_v5e_tune")
    parts = [
        report.grid_summary(record),
        "",
        report.superseded(record),
        "",
        "Before (the old defaults, timed in the tuning sweep at its commit "
        f"{tune['meta']['commit'][:10]}) and after (today's defaults, in the grid):",
        "",
        report.before_after(tune, record),
        "",
        "Float32 matmul, [4096, 4096] @ [4096, 4096], at each matmul-precision setting:",
        "",
        report.precision_table(record),
        "",
        "A decoder layer (bf16, 2048 tokens, width 4096, 32 heads of 128, FFN 14336) from the shipped "
        f"rmsnorm and matmul and the {report.layer_attention(record)}, against XLA's matmuls and JAX's flash "
        "attention:",
        "",
        report.layer_table(record),
        "",
        "Every point:",
        "",
        report.grid_table(record),
        "",
        f"Not measured: {record['meta']['not_run']}" if record["meta"].get("not_run") else "",
        "",
        report.provenance(record),
    ]
    return "\n".join(parts).replace("\n\n\n", "\n\n") + "\n"


def chip_drawn_table() -> str:
    """The drawn section's record (bench/reports/chip_v5e_drawn.json): each kernel's speed against
    its baseline over shapes drawn from public model configs at run time."""
    from tpu_kernels.chip import drawn, report

    record = _read("chip_v5e_drawn")
    rows = record["drawn"]["rows"]
    planned = len(drawn.build(record["meta"]["seed"]))
    parts = [
        f"Seed {record['meta']['seed']}: {len(rows)} of the draw's {planned} points measured "
        f"({planned - len(rows)} left at the run's time budget); speed is the baseline's time over the "
        "kernel's, per call (dispatch included; inputs cycled where XLA prefetches across calls).",
        "",
        drawn.table(rows),
        "",
    ]
    layer_rows = record.get("drawn_layer", {}).get("rows", [])
    if layer_rows:
        configs = {r["model"] for r in layer_rows}
        drawn_configs = len(drawn.layers(record["meta"]["seed"]))
        left = " (the rest left at the run's time budget)" if len(configs) < drawn_configs else ""
        parts += [
            f"The decoder layer (`drawn_layer`) at {len(configs)} of the draw's {drawn_configs} layer "
            f"configs{left}, against the same layer from XLA's matmuls and rmsnorm and JAX's flash attention:",
            "",
            "| model | tokens, width, heads, FFN | pass | our attention | ours | XLA + JAX flash | speed |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in layer_rows:
            d = r["dims"]
            speed = f"{r['speed_vs_xla']:.2f}x" if "speed_vs_xla" in r else "-"
            parts.append(
                f"| {r['model']} | {d['tokens']}, {d['d']}, {d['heads']}x{d['head_dim']}, {d['ffn']} | "
                f"{'forward + backward' if r['backward'] else 'forward'} | {report.attention_of(r)} | "
                f"{r.get('ours_ms', '-')} ms | "
                f"{r.get('xla_ms', '-')} ms | {speed} |"
            )
        parts.append("")
    parts.append(report.provenance(record))
    return "\n".join(parts) + "\n"


def attention_family_table() -> str:
    """bench/chip_attention_family.py's record (bench/reports/chip_v5e_attention_family.json): the
    attention family against JAX's flash attention, XLA and torch_tpu's SDPA at drawn shapes."""
    record = _read("chip_v5e_attention_family")
    runs = ", ".join(f"{r['commit']} ({r['section']}, {len(r['rows'])} rows)" for r in record["runs"])
    v = record["versions"]
    return (
        f"Seed {record['seed']}: {len(record['draws'])} points, each forward and forward + backward; "
        "speed is the baseline's time over the kernel's.\n\n"
        + script("chip_attention_family").summary(record)
        + f"\n\n_Measured by `{record['command']}` on one {record['device']} (JAX {v['jax']}, Python "
        f"{v['python']}, torch {v['torch']}, torch_tpu {v['torch_tpu']}), tpu_kernels {runs}._\n"
    )


def linear_cross_entropy_table() -> str:
    """bench/chip_linear_cross_entropy.py's record (bench/reports/chip_v5e_linear_cross_entropy.json):
    the fused LM head and loss against the unfused loss in JAX and through torch, its memory, and
    bench/chip_train_llama.py's 20 steps."""
    record = _read("chip_v5e_linear_cross_entropy")
    runs = ", ".join(f"{r['commit']} ({r['section']}, {len(r['rows'])} rows)" for r in record["runs"])
    v = record["versions"]
    return (
        f"Seed {record['seed']}: {len(record['points'])} points; speed is the unfused time over the fused.\n\n"
        + script("chip_linear_cross_entropy").summary(record)
        + f"\n\n_Measured by `{record['command']}` on one {record['device']} (JAX {v['jax']}, Python "
        f"{v['python']}, torch {v['torch']}, torch_tpu {v['torch_tpu']}), tpu_kernels {runs}; "
        f"{record['tree_note']}_\n"
    )


def chip_headline() -> str:
    from tpu_kernels.chip import report

    record = _read("chip_v5e")
    return report.headline(record) + "\n\n" + report.provenance(record) + "\n"


def torch_tpu_headline() -> str:
    """The torch-on-TPU figures: the TPU suite's record and bench/torch_on_tpu.py's."""
    return script("torch_on_tpu").headline(_read("torch_tpu_v5e"), _read("tpu_suite_v5e"))


def varlen_table() -> str:
    record = _read("varlen")
    f = record["figures"]
    head, *table = script("varlen").report(f["runs"], f["lengths"], f["max_len"])
    rows = [line for line in table if line.startswith("|")]
    notes = [f"- {line}" for line in table if not line.startswith("|")]
    return "\n".join([head, "", *rows, "", *notes]) + f"\n\n{_script_provenance(record)}\n"


def generate_table() -> str:
    record = _read("generate")
    return script("generate").table(record["figures"]) + f"\n\n{_script_provenance(record)}\n"


def breakdown_tables() -> str:
    record = _read("breakdown")
    lines = script("generate").breakdown_report(record["figures"])
    return "\n".join(lines) + f"\n\n{_script_provenance(record)}\n"


def ops_table() -> str:
    """Every shipped op (and a Tokamax op) against its floor and its own JAX function."""
    record = _read("overhead")
    figures = record["figures"]
    table = script("overhead").op_markdown(figures["ops"], figures.get("native_checks"))
    return table + f"\n\n{_script_provenance(record)}\n"


def dispatch_table() -> str:
    """Synchronous against asynchronous JAX CPU dispatch: small and large ops, threads, Ctrl-C."""
    record = _read("dispatch")
    return script("dispatch_modes").table(record["figures"]) + f"\n\n{_script_provenance(record)}\n"


def chip_tuning_table() -> str:
    """The tuner's v5e predictions against the chip's tuning sweeps, before and after the cost
    model's fit (bench/chip_tuning.py's record)."""
    return script("chip_tuning").markdown(_read("chip_v5e_tuning_fit"))


GENERATORS = {
    "perf-bench-time": bench_time,
    "perf-chip-tuning": chip_tuning_table,
    "perf-headline": headline,
    "perf-run": run_summary,
    "perf-kernels": kernels_table,
    "perf-tokamax": tokamax_table,
    "perf-overhead": overhead_table,
    "perf-tuning": tuning_table,
    "perf-startup": startup_table,
    "perf-varlen": varlen_table,
    "perf-chip": chip_tables,
    "perf-chip-drawn": chip_drawn_table,
    "perf-attention-family": attention_family_table,
    "perf-linear-cross-entropy": linear_cross_entropy_table,
    "perf-chip-headline": chip_headline,
    "perf-torch-tpu-headline": torch_tpu_headline,
    "perf-generate": generate_table,
    "perf-breakdown": breakdown_tables,
    "perf-ops": ops_table,
    "perf-dispatch": dispatch_table,
}
