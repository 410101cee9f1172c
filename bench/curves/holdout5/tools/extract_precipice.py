"""Extract PrecipiceBlades/cs336-assignment5-alignment GRPO MATH validation curves (holdout5).

Raw file: git show fc43ceb108b7e21dedb76b508dd2f3716bfdf6a5:results/grpo_experiments.md (= HEAD of the snapshot).
Two markdown tables, "| Step | <run> | <run> ... |", values printed as percentages ("23.86%"; manifest "scale": 0.01).

Selection rule (fixed before reading any value): every run column of every "| Step |" table, tables and columns in
file order, keeping only rows whose Step cell is an integer (the "**Final**" row has no step and is dropped, as are
cells printed "-"); a column qualifies with >= 8 points; first 5 columns (cap per repository). The sixth column
(masked_normalize + std_false) is left out by the cap. Values copied as printed, '%' stripped.

usage: python3 extract_precipice.py RAW_MD OUT_DATA_DIR
"""
import sys
from pathlib import Path

md, out = Path(sys.argv[1]).read_text().splitlines(), Path(sys.argv[2])
ids = {
    "reinforce_with_baseline": "precipice_math_grpo_reinforce_baseline_qwen25_math_1p5b",
    "no_baseline": "precipice_math_grpo_no_baseline_qwen25_math_1p5b",
    "masked_mean + std_true": "precipice_math_grpo_maskedmean_std_qwen25_math_1p5b",
    "masked_normalize + std_true": "precipice_math_grpo_maskednorm_std_qwen25_math_1p5b",
    "masked_mean + std_false": "precipice_math_grpo_maskedmean_nostd_qwen25_math_1p5b",
}
cols, taken = [], 0
i = 0
while i < len(md):
    line = md[i]
    if line.startswith("| Step |"):
        header = [c.strip() for c in line.strip().strip("|").split("|")]
        series = {h: [] for h in header[1:]}
        j = i + 2
        while j < len(md) and md[j].startswith("|"):
            cells = [c.strip() for c in md[j].strip().strip("|").split("|")]
            if cells[0].isdigit():
                for h, c in zip(header[1:], cells[1:]):
                    if c.endswith("%"):
                        series[h].append((int(cells[0]), c.rstrip("%")))
            j += 1
        cols.extend(series.items())
        i = j
    else:
        i += 1
for h, pts in cols:
    if len(pts) < 8 or taken >= 5:
        print("not taken:", h, len(pts))
        continue
    taken += 1
    with open(out / f"{ids[h]}.csv", "w") as fh:
        fh.write("step,value\n")
        for s, v in pts:
            float(v)
            fh.write(f"{s},{v}\n")
    print(ids[h], len(pts))
