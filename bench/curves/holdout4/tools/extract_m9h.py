"""Extract m9h/societies-of-thought Claim-B PPO curves (val/test_score/countdown).

Raw files (get them with git show):
  git show 715cfdf3e2f3abd8d96a422afb5f3bd9c3fdff9d:results/claimB/curves_paper_faithful.json
  git show 6e1f475852a6d4445b0446c7e2608b96a15a87d1:results/claimB/curves.json
(both byte-identical at HEAD 6dd72c754efaf857a1347b9d87fb311825d7e61f).

Selection rule (fixed before reading any value): all three arms of
curves_paper_faithful.json in file order (baseline, dialogue, monologue), then
the arms of the first model in curves.json (Qwen/Qwen2.5-3B) in file order,
each with >= 8 evaluations, until the cap of 5 curves per repository
(-> Qwen baseline and dialogue). Values are written verbatim (repr of the JSON float).

usage: python3 extract_m9h.py RAW_DIR OUT_DATA_DIR
"""
import json, sys
from pathlib import Path

raw, out = Path(sys.argv[1]), Path(sys.argv[2])
jobs = []
f = json.loads((raw / "curves_paper_faithful.json").read_text())
for arm in f["curves"]:
    jobs.append((f"m9h_countdown_faithful_{arm}_qwen25_3b", f["steps"], f["curves"][arm]))
c = json.loads((raw / "curves.json").read_text())
model = next(iter(c["models"]))
assert model == "Qwen/Qwen2.5-3B"
m = c["models"][model]
for arm in ["baseline", "dialogue", "monologue"]:
    jobs.append((f"m9h_countdown_indomain_{arm}_qwen25_3b", m["steps"], m[arm]))
jobs = [j for j in jobs if len(j[1]) >= 8][:5]
for cid, steps, vals in jobs:
    assert len(steps) == len(vals)
    with open(out / f"{cid}.csv", "w") as fh:
        fh.write("step,value\n")
        for s, v in zip(steps, vals):
            fh.write(f"{int(s)},{v!r}\n")
    print(cid, len(steps))
