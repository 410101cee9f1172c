"""Turn a published training log into a corpus CSV (``step,value``): the extractors used for bench/curves/data.

Each reads text that a public repository committed and returns the evaluation points of one metric in training
order; nothing is smoothed, resampled or invented. Usage::

    python bench/curves/extract.py verl LOGFILE 'val/test_score/openai/gsm8k' > bench/curves/data/NAME.csv
    python bench/curves/extract.py trl trainer_state.json eval_rewards/accuracy_reward/mean > ...
    python bench/curves/extract.py table lr_sweep_data.csv 'run_name=lr_sweep_1e-5,metric=eval/reward|step|value'

``verl``: verl's console logger prints one line per step, ``step:N - key:value - key:value ...`` (values are plain
numbers or, in newer versions, ``np.float64(x)``); the validation metrics appear on every ``test_freq``-th line and
on the ``step:0`` line when validation runs before training. ``trl``: a Hugging Face ``trainer_state.json``'s
``log_history`` entries that hold the key. ``table``: a CSV table (a W&B export, an eval-points table); the key
``COL=VAL,...|XCOL|YCOL`` selects one run's rows and the step and value columns. A repeated step keeps its last value
(a resumed run re-logs it).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from typing import Iterable

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"\bstep:(\d+) - ")


def verl_console(text: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` on verl console lines ``step:N - ... key:value ...``."""
    value = re.compile(re.escape(key) + r":(?:np\.float64\()?(-?[0-9.]+(?:[eE][-+]?\d+)?)")
    points: dict[int, float] = {}
    for line in _ANSI.sub("", text).splitlines():
        s, v = _STEP.search(line), value.search(line)
        if s and v:
            points[int(s.group(1))] = float(v.group(1))
    return sorted(points.items())


def trl_log_history(text: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` in a trainer_state.json's ``log_history``."""
    points = {int(e["step"]): float(e[key]) for e in json.loads(text)["log_history"] if key in e}
    return sorted(points.items())


def table_csv(text: str, key: str) -> list[tuple[int, float]]:
    """(step, value) from a CSV table: key ``COL=VAL[,COL=VAL...]|XCOL|YCOL`` keeps the rows whose columns equal
    the values and reads (int(XCOL), float(YCOL)) from each."""
    where, xcol, ycol = key.split("|")
    conds = [c.split("=", 1) for c in where.split(",") if c]
    rows = csv.DictReader(io.StringIO(text))
    points = {int(r[xcol]): float(r[ycol]) for r in rows if all(r[c] == v for c, v in conds)}
    return sorted(points.items())


def to_csv(points: Iterable[tuple[int, float]]) -> str:
    return "step,value\n" + "".join(f"{s},{v:.6g}\n" for s, v in points)


if __name__ == "__main__":
    kind, path, key = sys.argv[1:4]
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    sys.stdout.write(to_csv({"verl": verl_console, "trl": trl_log_history, "table": table_csv}[kind](text, key)))
