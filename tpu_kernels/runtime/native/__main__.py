"""`python -m tpu_kernels.runtime.native build|status`: compile the C++ extensions for this torch and
Python, or say where they are and whether a process would load them (tpu_kernels/runtime/native)."""

from __future__ import annotations

import argparse
import sys

from tpu_kernels.runtime import native


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu_kernels.runtime.native", description=__doc__)
    parser.add_argument("command", choices=["build", "status"])
    args = parser.parse_args(argv)
    if args.command == "build":
        for name in native.EXTENSIONS:
            try:
                path = native.build(name)
            except Exception as e:  # the compiler's own message says what is missing
                print(f"tpu_kernels.runtime.native: could not build {name}: {e}", file=sys.stderr)
                print("the Python checks run instead (same results, slower)", file=sys.stderr)
                return 1
            print(f"{name}: {path}")
        return 0
    for name, info in native.status().items():
        state = "built" if info["built"] else "not built"
        if info["untrusted"]:
            state += f", not loaded: {info['untrusted']}"
        elif not info["enabled"]:
            state += f", turned off ({native.ENV})"
        print(f"{name}: {state} ({info['library']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
