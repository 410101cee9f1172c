"""Extract the five GSM8K validation curves of cfw20/cs224r-project-e3 (holdout4).

Source: project_writeup/results_version_G.json at commit 271c50aae431ba9a37da4cebac68a151620afc63 (a W&B history
dump the authors committed). Selection rule (fixed before reading values): every run under "training" with >= 8
non-empty val/<data_source>/test_score/ points, in file order, first 5 (cap per repository). Reads the git object
from a fetched mirror (``git show``); writes step,value with the JSON number repr unchanged.

usage: python extract_cfw20.py /work/.mirror/cfw20+cs224r-project-e3/repo OUT_DIR
"""
import json, subprocess, sys
from pathlib import Path

COMMIT = "271c50aae431ba9a37da4cebac68a151620afc63"
PATH = "project_writeup/results_version_G.json"
IDS = {
    "gsm8k_clean": "cfw20_gsm8k_grpo_clean_qwen3_1p7b",
    "gsm8k_trivia_only": "cfw20_gsm8k_grpo_trivia_qwen3_1p7b",
    "gsm8k_partial_e3_clean": "cfw20_gsm8k_e3_clean_qwen3_1p7b",
    "gsm8k_partial_e3_trivia": "cfw20_gsm8k_e3_trivia_qwen3_1p7b",
    "gsm8k_track_e_2M_partial_e3": "cfw20_gsm8k_e3_mixed_qwen3_1p7b",
}


def main(mirror: str, out: str) -> None:
    text = subprocess.run(["git", "-C", mirror, "show", f"{COMMIT}:{PATH}"], check=True, capture_output=True).stdout
    data = json.loads(text)
    taken = 0
    for run, block in data["training"].items():  # file order
        rows = block["rows"]
        keys = [k for k in rows[0] if k.startswith("val/") and k.endswith("/test_score/")]
        if len(keys) != 1:
            continue
        key = keys[0]
        pts = [(r["_step"], r[key]) for r in rows if r.get(key) is not None]
        if len(pts) < 8 or taken == 5:
            print("skip", run, len(pts))
            continue
        taken += 1
        steps = [s for s, _ in pts]
        assert steps == sorted(steps) and len(set(steps)) == len(steps), run
        name = IDS[run]
        body = "step,value\n" + "".join(f"{int(s)},{json.dumps(v)}\n" for s, v in pts)
        Path(out, f"{name}.csv").write_text(body)
        print(name, key, len(pts))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
