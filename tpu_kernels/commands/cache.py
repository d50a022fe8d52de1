"""`tpu-kernels cache`: show or clear the on-disk kernel cache.

tpu-kernels cache info     entries and bytes (this host's, every host's), logged hits and misses
tpu-kernels cache clear    delete every entry and the log

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


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def run(args: argparse.Namespace) -> int:
    from tpu_kernels.runtime import cache

    root = args.dir if args.dir is not None else cache.directory()
    if root is None:
        print(f"the on-disk kernel cache is off ({cache.ENV}=off)", file=sys.stderr)
        return EXIT_USAGE if args.action == "clear" else 0
    try:
        if args.action == "clear":
            n = cache.clear(root)
            print(f"removed {n} files from {root}")
            return 0
        info = cache.info(root)
    except cache.CacheDirError as e:
        print(f"tpu-kernels cache: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    print(f"directory  {root}")
    here, every, legacy = info["this_host"], info["all_hosts"], info["legacy"]
    print(
        f"this host  {here['entries']:>6} entries  {_size(here['bytes']):>10}  (executables for {here['host']})"
    )
    print(
        f"all hosts  {every['entries']:>6} entries  {_size(every['bytes']):>10}  ({every['hosts']} host kinds)"
    )
    if legacy["entries"]:
        print(
            f"old format {legacy['entries']:>6} entries  {_size(legacy['bytes']):>10}  (never read; `cache clear` removes them)"
        )
    if info["untrusted"]:
        print(f"NOT USED   {info['untrusted']} (docs/caching.md)")
    logged = info["logged"]
    events = ("hits", "misses", "writes", "rejected", "evicted", "uncacheable")
    print("logged     " + "  ".join(f"{e} {logged.get(e, 0)}" for e in events) + "  (all processes)")
    for op, counts in sorted(info["ops"].items()):
        print(f"  {op:<40} " + "  ".join(f"{e} {counts[e]}" for e in events if counts.get(e)))
    return 0
