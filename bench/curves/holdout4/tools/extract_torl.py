"""Extract hugehaba/ToRL-Reproduction training-time validation curves (holdout4).

Raw file: git show 0c077ee0a08df1981e43e92ad722d2cc4da423d6:results/torl_validation_summary.csv
(byte-identical at HEAD 5b32f1016e1c991219f129d9a8590e7d110072d0). Header: step,AIME24,MATH500,AIME25,Average;
values are percentages (manifest carries "scale": 0.01).

Selection rule (fixed before reading any value): every per-benchmark column in file order (AIME24, MATH500,
AIME25) with >= 8 rows; the derived 'Average' column is excluded (it is a mean of the other three). All three
curves come from the same single run. Values are copied verbatim as strings (the '%' sign, if any, stripped).

usage: python3 extract_torl.py RAW_DIR OUT_DATA_DIR
"""
import csv, sys
from pathlib import Path

raw, out = Path(sys.argv[1]), Path(sys.argv[2])
rows = list(csv.DictReader(open(raw / "torl_validation_summary.csv", newline="")))
ids = {"AIME24": "torl_aime24_grpo_qwen25_math_7b", "MATH500": "torl_math500sub_grpo_qwen25_math_7b",
       "AIME25": "torl_aime25_grpo_qwen25_math_7b"}
for col in ["AIME24", "MATH500", "AIME25"]:
    pts = [(int(r["step"]), r[col].strip().rstrip("%")) for r in rows if r[col].strip()]
    assert len(pts) >= 8, (col, len(pts))
    steps = [s for s, _ in pts]
    assert steps == sorted(steps)
    with open(out / f"{ids[col]}.csv", "w") as fh:
        fh.write("step,value\n")
        for s, v in pts:
            float(v)
            fh.write(f"{s},{v}\n")
    print(ids[col], len(pts))
