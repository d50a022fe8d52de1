"""PNG plots: median time per call against problem size, one line per candidate."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from tpu_kernels.bench.results import Report  # noqa: E402


def _size(r) -> float:
    return r.bytes or r.flops or 0.0


def write(report: Report, out_dir: Path) -> list[Path]:
    """One PNG per benchmark; a panel per dtype when the sweep has several."""
    by_bench: dict[str, list] = defaultdict(list)
    for r in report.results:
        by_bench[r.benchmark].append(r)
    paths = []
    for name, points in by_bench.items():
        groups: dict[str, list] = defaultdict(list)
        for r in points:
            groups[str(r.point.get("dtype", ""))].append(r)
        fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
        for ax, (dtype, rs) in zip(axes[0], sorted(groups.items())):
            rs = sorted(rs, key=_size)
            names = list(dict.fromkeys(c.name for r in rs for c in r.candidates))
            labels = [
                r.point_id.replace(f",dtype={dtype}", "").replace(f"dtype={dtype}", "") or r.point_id
                for r in rs
            ]
            for cand in names:
                xs, ys = [], []
                for i, r in enumerate(rs):
                    c = r.candidate(cand)
                    if c is not None and c.median:
                        xs.append(i)
                        ys.append(c.median * 1e3)
                if xs:
                    ax.plot(xs, ys, marker="o", label=cand)
            ax.set_xticks(range(len(rs)), labels, rotation=20, ha="right", fontsize=8)
            ax.set_yscale("log")
            plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.set_ylabel("median time per call (ms)")
            ax.set_title(f"{name}" + (f" ({dtype})" if dtype else ""))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"{report.device['type']}: {report.device['name']}", fontsize=9)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
