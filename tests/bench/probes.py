"""Running a chip probe (bench/chip_*_probe.py) on the CPU as the TPU host would: torch blocked,
Pallas in its interpreter, at the probe's small shapes; and loading a bench/ script as a module."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_without_torch(script: str, out: Path, timeout: int = 300) -> list[dict]:
    """Run bench/`script` --quick --interpret with torch unimportable; its JSON lines."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    code = ("import sys, runpy; sys.modules['torch'] = None; "
            f"sys.argv = [{script!r}, '--quick', '--interpret', '--out', {str(out)!r}]; "
            f"runpy.run_path('bench/{script}', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def load(script: str):
    """bench/`script` imported as a module (bench/ is on sys.path, as when the script runs)."""
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(Path(script).stem, ROOT / "bench" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
