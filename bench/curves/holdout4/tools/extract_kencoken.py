"""One Countdown held-out curve from kencoken/qwen-grpo (holdout4).

Source: experiment_log.md at commit 79a479c208b8b2ab446916eec32f81b2c3559042 (E10, "D1 convergence run"): the
line after "Held-out eval (n=48, sampled at train temp), steps 100→800:" lists eight values separated by " · ".
Selection rule: every in-training held-out eval series with >= 8 points written out in experiment_log.md (only this
one qualifies; the other runs report only a final greedy eval). Steps 100..800 every 100 are taken from that
sentence (the run evaluated every 100 steps). Values copied as printed (3 decimals).

usage: python extract_kencoken.py /work/.mirror/kencoken+qwen-grpo/repo OUT_DIR
"""
import re, subprocess, sys
from pathlib import Path

COMMIT = "79a479c208b8b2ab446916eec32f81b2c3559042"


def main(mirror: str, out: str) -> None:
    text = subprocess.run(["git", "-C", mirror, "show", f"{COMMIT}:experiment_log.md"], check=True,
                          capture_output=True).stdout.decode()
    head = "Held-out eval (n=48, sampled at train temp), steps 100→800:"
    i = text.index(head)
    line = text[i + len(head):].strip().splitlines()[0]
    vals = re.findall(r"[01]\.[0-9]{3}", line.split("**")[1])
    assert len(vals) == 8, vals
    steps = list(range(100, 801, 100))
    Path(out, "kencoken_countdown_d1_grpo_qwen25_7b.csv").write_text(
        "step,value\n" + "".join(f"{s},{v}\n" for s, v in zip(steps, vals)))
    print(list(zip(steps, vals)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
