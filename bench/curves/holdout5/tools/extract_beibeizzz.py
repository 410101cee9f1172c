"""Extract beibeizzz/countdown_post_train GRPO training-batch accuracy curves (holdout5, train_reward).

Raw files: git show 5fbed0e38150e4e2d0df650aea6bfb023cd05722:post_train/outputs/<run>/metrics.jsonl (HEAD of the
snapshot), one JSON object per logged step with keys step, accuracy, mean_reward, format_rate, ...
`accuracy` is the fraction of the step's rollouts whose Countdown answer is correct (train_grpo.py line 152:
correct rollouts / rollout_count), i.e. a TRAINING metric, not a held-out one. The held-out evaluation of these
runs has only 1-2 points (eval/step_250, eval/step_500) and does not qualify.

Selection rule (fixed from the file list and keys, before the values were used): every
post_train/outputs/grpo*/metrics.jsonl, sorted path order (grpo, grpo_trl); (step, accuracy) of every row, values
copied as printed; if step restarts, keep only the last launch (it does not in either file); >= 8 rows; both are
marked "metric_kind": "train_reward". Nothing is smoothed or resampled.

usage: python3 extract_beibeizzz.py RAW_DIR OUT_DATA_DIR   (RAW_DIR holds grpo.metrics.jsonl, grpo_trl.metrics.jsonl)
"""
import json, sys
from pathlib import Path

raw, out = Path(sys.argv[1]), Path(sys.argv[2])
ids = {
    "grpo": "beibeizzz_countdown_grpo_trainacc_qwen3_0p6b_sft",
    "grpo_trl": "beibeizzz_countdown_trlgrpo_trainacc_qwen3_0p6b_sft",
}
for run in sorted(ids):
    text = (raw / f"{run}.metrics.jsonl").read_text().splitlines()
    rows = [json.loads(l) for l in text if l.strip()]
    start = 0
    for i in range(1, len(rows)):
        if rows[i]["step"] <= rows[i - 1]["step"]:
            start = i
    rows = rows[start:]
    # re-read the printed number from the raw line so the CSV keeps it as written
    pts = [(r["step"], repr(r["accuracy"])) for r in rows]
    assert len(pts) >= 8
    with open(out / f"{ids[run]}.csv", "w") as fh:
        fh.write("step,value\n")
        for s, v in pts:
            assert 0.0 <= float(v) <= 1.0
            fh.write(f"{s},{v}\n")
    print(ids[run], len(pts), "restart_at_row", start)
