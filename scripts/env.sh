# Sourced by scripts/test, scripts/test-py311 and scripts/bench: find or build the Python environment.
#
# The environment is a virtualenv outside the checkout (torch's CUDA wheels make
# it ~7 GB), reused by every clone on this machine: $TPU_KERNELS_VENV, default
# ~/.cache/tpu-kernels/venv-$TPU_KERNELS_PYTHON_ENV. It is (re)installed from its lock
# when that file changes; on a fresh machine the first run takes ~5 minutes.
#
# TPU_KERNELS_PYTHON_ENV picks which environment:
#   py312 (default)  Python >= 3.12, requirements/lock.txt (torch 2.14.1, JAX 0.12.0.1, Tokamax)
#   py311            Python 3.11, requirements/lock-py311.txt: the TPU v5e machine's versions
#                    (torch 2.13.0 CPU, JAX 0.10.2), without Tokamax (it needs Python >= 3.12)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON_ENV=${TPU_KERNELS_PYTHON_ENV:-py312}
case "$PYTHON_ENV" in
  py312) LOCK=$ROOT/requirements/lock.txt; PY_VERSION=3.12; PY_OK="sys.version_info >= (3, 12)" ;;
  py311) LOCK=$ROOT/requirements/lock-py311.txt; PY_VERSION=3.11; PY_OK="sys.version_info[:2] == (3, 11)" ;;
  *) echo "TPU_KERNELS_PYTHON_ENV=$PYTHON_ENV: expected py312 or py311" >&2; return 1 2>/dev/null || exit 1 ;;
esac
VENV=${TPU_KERNELS_VENV:-$HOME/.cache/tpu-kernels/venv-$PYTHON_ENV}

# The environment's Python (PY_OK): TPU_KERNELS_PYTHON if set, else the first one found.
find_python() {
  local c
  for c in "${TPU_KERNELS_PYTHON:-}" "python$PY_VERSION" python3.13 python3 \
           "$HOME"/.pyenv/versions/"$PY_VERSION"*/bin/python3 "/usr/bin/python$PY_VERSION" "/usr/local/bin/python$PY_VERSION"; do
    [ -n "$c" ] || continue
    if "$c" -c "import sys; sys.exit(not ($PY_OK))" >/dev/null 2>&1; then
      echo "$c"; return 0
    fi
  done
  if [ "$PYTHON_ENV" = py312 ]; then
    echo "the py312 environment needs Python >= 3.12 (Tokamax uses PEP 695 syntax); set TPU_KERNELS_PYTHON," \
         "or TPU_KERNELS_PYTHON_ENV=py311 for the Python 3.11 environment (without Tokamax)" >&2
  else
    echo "the py311 environment needs Python 3.11 (its lock pins cp311 wheels); set TPU_KERNELS_PYTHON" >&2
  fi
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  PY=$(find_python)
  echo "== creating $VENV with $PY"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi

# pip's own chatter (version checks, warnings about this machine's extra package
# indexes) is noise in a test or benchmark log; real errors still fail the script.
pip_quiet() {
  "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2>&1 \
    | { grep -v -e 'is ignored: it is neither a file nor a directory' || true; }
  return "${PIPESTATUS[0]}"
}

want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ "$(cat "$VENV/.lock-sha256" 2>/dev/null)" != "$want" ]; then
  echo "== installing ${LOCK#"$ROOT"/} into $VENV (first time: several minutes)"
  pip_quiet install --upgrade pip
  # The lock is the whole environment (pip freeze), so nothing needs resolving: --no-deps
  # keeps it exact. It matters for torchtitan, whose declared requirements (datasets,
  # wandb, torchdata, ...) the model and parallelize code tpu_kernels uses never import
  # (docs/torchtitan.md).
  pip_quiet install --no-deps -r "$LOCK"
  echo "$want" > "$VENV/.lock-sha256"
fi

# Point the environment's tpu_kernels (and the `tpu-kernels` command) at this checkout,
# once per checkout and packaging change: the editable install takes seconds and prints
# setuptools banners, so it is skipped when the stamp says it is already done.
stamp="$ROOT $(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$VENV/.editable-stamp" 2>/dev/null)" != "$stamp" ]; then
  pip_quiet install --no-deps --no-build-isolation -e "$ROOT" >/dev/null
  echo "$stamp" > "$VENV/.editable-stamp"
fi

# torch auto-loads torch_tpu (installed from the lock) in every process that imports
# torch: seconds of start-up and libtpu log lines in each spawned worker. Without a
# TPU (no /dev/accel* or /dev/vfio device) nothing needs it loaded, and code that wants it
# imports it explicitly; docs/devices.md says why. `import tpu_kernels` sets the same default
# (and JAX_PLATFORMS=cpu: tpu_kernels/startup.py); this covers a process that imports torch first.
if ! compgen -G "/dev/accel*" >/dev/null && ! compgen -G "/dev/vfio/[0-9]*" >/dev/null; then
  export TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-0}
fi

export PATH="$VENV/bin:$PATH"
export PYTHONUNBUFFERED=1
