"""KleistvonLiu/assignment5-alignment GRPO MATH validation curve (holdout5), transcribed.

Source: outputs/grpo_full_mathv2/eval_metrics.jsonl @ 3368ea6d12043782bbaa74f2ce4330e18720a046 (18,000 characters),
read through the search index's read_file (no fetchable snapshot of this repository exists here). One JSON object
per evaluation: eval_step, answer_reward_mean (= reward_mean), num_eval_examples 1024,
category_counts.correct_format_and_answer.

The file holds four launches appended one after another (eval_step restarts at 0 three times; the first three
launches stop at steps 60, 50 and 0). Selection rule (fixed before reading any value): every outputs/grpo_*/
eval_metrics.jsonl (grpo_full_mathv2 and grpo_smoke_mathv2), keep only the last launch (rows from the last
eval_step == 0 on), qualify with >= 8 rows. grpo_smoke_mathv2 is a 1-step smoke run and does not qualify.

Below: (eval_step, answer_reward_mean as printed, correct_format_and_answer) for every row of the last launch,
copied by hand. The script checks each value against count/1024 (an independent field of the same row).

usage: python3 kleistvonliu_transcribed.py OUT_DATA_DIR
"""
import sys
from fractions import Fraction
from pathlib import Path

ROWS = [
    (0, "0.044921875", 46),
    (10, "0.1630859375", 167),
    (20, "0.30078125", 308),
    (30, "0.4287109375", 439),
    (40, "0.4697265625", 481),
    (50, "0.5087890625", 521),
    (60, "0.5390625", 552),
    (70, "0.564453125", 578),
    (80, "0.5908203125", 605),
    (90, "0.5908203125", 605),
    (100, "0.5947265625", 609),
    (110, "0.6337890625", 649),
    (120, "0.6279296875", 643),
]
for s, v, k in ROWS:
    assert Fraction(v) == Fraction(k, 1024), (s, v, k)
out = Path(sys.argv[1])
with open(out / "kleist_math_grpo_full_qwen25_math_1p5b.csv", "w") as fh:
    fh.write("step,value\n")
    for s, v, _ in ROWS:
        fh.write(f"{s},{v}\n")
print("kleist_math_grpo_full_qwen25_math_1p5b", len(ROWS))
