# Sourced by scripts/test and scripts/bench: find or build the Python environment.
#
# The environment is a virtualenv outside the checkout (torch's CUDA wheels make
# it ~7 GB), reused by every clone on this machine: $TPU_KERNELS_VENV, default
# ~/.cache/tpu-kernels/venv-py312. It is (re)installed from requirements/lock.txt
# when that file changes; on a fresh machine the first run takes ~5 minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${TPU_KERNELS_VENV:-$HOME/.cache/tpu-kernels/venv-py312}
LOCK=$ROOT/requirements/lock.txt

find_python() {
  local c
  for c in "${TPU_KERNELS_PYTHON:-}" python3.12 python3.13 python3 \
           "$HOME"/.pyenv/versions/3.12*/bin/python3 /usr/bin/python3.12 /usr/local/bin/python3.12; do
    [ -n "$c" ] || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
      echo "$c"; return 0
    fi
  done
  echo "tpu_kernels needs Python >= 3.12 (Tokamax uses PEP 695 syntax); set TPU_KERNELS_PYTHON" >&2
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  PY=$(find_python)
  echo "== creating $VENV with $PY"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi

want=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ "$(cat "$VENV/.lock-sha256" 2>/dev/null)" != "$want" ]; then
  echo "== installing requirements/lock.txt into $VENV (first time: several minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$LOCK"
  echo "$want" > "$VENV/.lock-sha256"
fi

# Point the environment's tpu_kernels (and the `tpu-kernels` command) at this checkout.
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT" >/dev/null

export PATH="$VENV/bin:$PATH"
export PYTHONUNBUFFERED=1
