#!/usr/bin/env bash
# The wheels that scalerl needs on the GPU machine and that its image lacks (bench/gpu_suite.py's docstring;
# /work/.library/device/KINDS.md lists what the image holds): pydantic and its own requirements (typing-extensions
# too, in case the image's is older than pydantic's >= 4.14.1), for CPython 3.12 on x86-64 Linux, into .whl/ at the
# repository root (git-ignored; the device call carries it).
#   bench/gpu_wheels.sh            # for the GPU machine (CPython 3.12)
#   PY=3.11 bench/gpu_wheels.sh    # the same list for another CPython (the fresh-venv check on this machine)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-3.12}"
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 \
  typing-extensions==4.16.0
ls -l .whl
du -sh .whl
