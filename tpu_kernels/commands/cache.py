"""`tpu-kernels cache`: show or clear the on-disk kernel cache.

tpu-kernels cache info     entries and bytes per tier, and the logged hits and misses
tpu-kernels cache clear    delete every entry (both tiers) and the log

See docs/caching.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tpu_kernels.commands._args import subcommand

EXIT_USAGE = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = subcommand(sub, "cache", __doc__)
    p.add_argument("action", choices=("info", "clear"), help="info: what is cached; clear: delete it")
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="the cache directory (default: TPU_KERNELS_CACHE_DIR or ~/.cache)",
    )
    p.add_argument("--json", action="store_true", help="info as JSON")
    p.set_defaults(run=run)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def run(args: argparse.Namespace) -> int:
    from tpu_kernels import disk_cache

    root = args.dir if args.dir is not None else disk_cache.directory()
    if root is None:
        print(f"the on-disk kernel cache is off ({disk_cache.ENV}=off)", file=sys.stderr)
        return EXIT_USAGE if args.action == "clear" else 0
    if args.action == "clear":
        n = disk_cache.clear(root)
        print(f"removed {n} files from {root}")
        return 0
    info = disk_cache.info(root)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    print(f"directory  {root}")
    for tier, what in (("exports", "lowered kernels"), ("xla", "XLA executables")):
        t = info[tier]
        print(f"{tier:<10} {t['entries']:>6} entries  {_size(t['bytes']):>10}  ({what})")
    logged = info["logged"]
    events = ("hits", "misses", "writes", "rejected", "uncacheable")
    print("logged     " + "  ".join(f"{e} {logged.get(e, 0)}" for e in events) + "  (all processes)")
    for op, counts in sorted(info["ops"].items()):
        print(f"  {op:<40} " + "  ".join(f"{e} {counts[e]}" for e in events if counts.get(e)))
    return 0
