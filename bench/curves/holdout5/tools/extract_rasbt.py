"""Extract rasbt/reasoning-from-scratch chapter-7 GRPO MATH-500 eval curves (holdout5).

Raw files: git show f79c9cd0ae7d824aa4e9a9bc2ca4a85167f81958:ch07/02_logs/<name>.csv (HEAD of the snapshot).
Header (7_6 example): step,total_steps,loss,kl_loss,policy_ratio,reward_avg,format_reward_avg,...,eval_acc.
eval_acc is filled only on evaluation rows and is a percentage (manifest "scale": 0.01).

Selection rule (fixed before reading any value): every CSV directly under ch07/02_logs that has an eval_acc
column, in sorted path order, keeping the rows whose eval_acc is non-empty; a file qualifies with >= 8 such rows;
cap 5 per repository. If the step column restarts inside a file (step <= previous step), only the rows from the
last restart on are kept (the earlier rows belong to an aborted launch). Values are copied as strings.

usage: python3 extract_rasbt.py RAW_DIR OUT_DATA_DIR   (RAW_DIR holds the five CSVs under their own names)
"""
import csv, sys
from pathlib import Path

raw, out = Path(sys.argv[1]), Path(sys.argv[2])
ids = {
    "7_3_plus_tracking_metrics.csv": "rasbt_math500_grpo_tracking_qwen3_0p6b",
    "7_4_plus_clip_ratio_metrics.csv": "rasbt_math500_grpo_clipratio_qwen3_0p6b",
    "7_5_plus_kl_metrics.csv": "rasbt_math500_grpo_kl_qwen3_0p6b",
    "7_6_plus_format_reward_metrics.csv": "rasbt_math500_grpo_formatreward_qwen3_0p6b_reasoning",
    "ch06_rlvr_grpo_original_no_kl_metrics.csv": "rasbt_math500_grpo_ch06_nokl_qwen3_0p6b",
}
for name in sorted(ids):
    rows = list(csv.DictReader(open(raw / name, newline="")))
    start = 0
    for i in range(1, len(rows)):
        if int(rows[i]["step"]) <= int(rows[i - 1]["step"]):
            start = i  # restart: keep only the last launch
    rows = rows[start:]
    pts = [(int(r["step"]), r["eval_acc"].strip()) for r in rows if r.get("eval_acc", "").strip()]
    assert len(pts) >= 8, (name, len(pts))
    with open(out / f"{ids[name]}.csv", "w") as fh:
        fh.write("step,value\n")
        for s, v in pts:
            float(v)
            fh.write(f"{s},{v}\n")
    print(ids[name], len(pts), "restart_at_row", start)
