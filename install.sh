#!/usr/bin/env bash
# Install scalerl and its test dependencies into the current Python environment.
#
# PyTorch is handled first: a bare `torch` requirement on a machine without torch pulls several GB of CUDA
# wheels. So when no torch is importable we install the CPU build (a local wheel when pip's find-links has one,
# else the official CPU index). A torch that is already installed -- a CUDA build included -- is left alone.
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
TORCH_VERSION="${SCALERL_TORCH_VERSION:-2.13.0}"

if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "install.sh: keeping the installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
  echo "install.sh: no torch found; installing the CPU build of torch==$TORCH_VERSION"
  "$PY" -m pip install --no-index "torch==$TORCH_VERSION" 2>/dev/null \
    || "$PY" -m pip install "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu \
    || "$PY" -m pip install "torch==$TORCH_VERSION"
fi
"$PY" -m pip install -q -e ".[dev]" "$@"
