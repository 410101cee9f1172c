#!/usr/bin/env bash
# Install scalerl into the current Python environment.
#
#   ./install.sh          the package and what `scalerl demo` needs, and bubblewrap for the code sandbox when
#                         apt-get is available as root
#   ./install.sh --dev    also the test dependencies, and Chromium for the report's browser test when apt-get
#                         is available as root (otherwise that one test skips)
#
# PyTorch is handled first: a bare `torch` requirement on a machine without torch pulls several GB of CUDA
# wheels. So when no torch is importable we install the CPU build (a local wheel when pip's find-links has one,
# else the official CPU index). A torch that is already installed -- a CUDA build included -- is left alone.
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
TORCH_VERSION="${SCALERL_TORCH_VERSION:-2.13.0}"
EXTRAS=""
BROWSER=0
for arg in "$@"; do
  case "$arg" in
    --dev) EXTRAS="[dev]"; BROWSER=1 ;;
    *) echo "install.sh: unknown option $arg (use --dev)" >&2; exit 2 ;;
  esac
done

if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "install.sh: keeping the installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
  echo "install.sh: no torch found; installing the CPU build of torch==$TORCH_VERSION"
  "$PY" -m pip install -q --no-index "torch==$TORCH_VERSION" 2>/dev/null \
    || "$PY" -m pip install -q "torch==$TORCH_VERSION" --index-url https://download.pytorch.org/whl/cpu \
    || "$PY" -m pip install -q "torch==$TORCH_VERSION"
fi
# pip's harmless notes about local mirror folders and running as root are filtered out; its exit status is kept
log="$(mktemp)"
status=0
"$PY" -m pip install -q -e ".$EXTRAS" >"$log" 2>&1 || status=$?
grep -v -e "is ignored: it is neither a file nor a directory" -e "Running pip as the 'root' user" "$log" >&2 || true
rm -f "$log"
if [ "$status" -ne 0 ]; then echo "install.sh: pip install failed (exit $status)" >&2; exit "$status"; fi
"$PY" -c "import scalerl, torch"

# apt_install PACKAGE COMMAND PURPOSE WITHOUT: install a Debian package when COMMAND is missing, if apt-get runs
# as root; otherwise say what happens without it
apt_install() {
  command -v "$2" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install.sh: installing $1 $3"
    (apt-get install -y -q "$1" >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$1" >/dev/null 2>&1)) \
      || echo "install.sh: could not install $1; $4"
  else
    echo "install.sh: $1 not found; $4"
  fi
}
if [ "$BROWSER" = 1 ]; then
  apt_install chromium chromium "for the report's browser test" "the report's browser test will skip"
fi
# bubblewrap: the code sandbox's outer layer (docs/tasks.md "The sandbox"); without it the fallback layers hold
apt_install bubblewrap bwrap "for the code sandbox" "code tasks use the fallback sandbox"
