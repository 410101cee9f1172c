#!/usr/bin/env bash
# The README's test command on a clean checkout: clone this repository into PARENT/scalerl, make a fresh venv in
# PARENT/venv, run `./install.sh --dev && python3 -m pytest -q` there, and print the counts and the seconds.
#   bench/fresh_checkout.sh /tmp/fresh        # a folder under /tmp
#   bench/fresh_checkout.sh ~/fresh           # one in the home directory
# Logs: PARENT/install.log, PARENT/pytest.log. The clone is of the committed HEAD (commit first).
set -u
parent="${1:?usage: bench/fresh_checkout.sh PARENT}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$parent" && mkdir -p "$parent"
git clone -q "$repo" "$parent/scalerl" && cd "$parent/scalerl" || exit 2
python3 -m venv "$parent/venv" && source "$parent/venv/bin/activate" || exit 2
echo "python: $(command -v python3)  commit: $(git log --oneline -1)"
start=$(date +%s)
./install.sh --dev > "$parent/install.log" 2>&1; echo "install exit status $?"
python3 -m pytest -q -p no:cacheprovider > "$parent/pytest.log" 2>&1; status=$?
tail -1 "$parent/pytest.log"; echo "pytest exit status $status; $(( $(date +%s) - start )) s in all"
exit "$status"
