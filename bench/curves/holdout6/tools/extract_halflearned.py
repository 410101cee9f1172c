"""Extract per-checkpoint eval curves from halflearned/rlvr-experiments NOTES.md at a fixed commit.

Selection rule (positional): every markdown table in NOTES.md whose first column is headed
'Step' or 'Checkpoint' (a training step) and which has >= 8 step rows; from each such table take the FIRST metric column only
(one curve per training run); tables in file order; cap 5 curves for the repository.
Values are the published percentages (scale 0.01). Bold markers are stripped; nothing else changed.
"""
import re, subprocess, csv, os, json
GIT = "/work/.mirror/halflearned+rlvr-experiments/repo"
COMMIT = "4cc16c8065ecceb758f95159a6ec7a3d302cd002"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
text = subprocess.run(["git", "-C", GIT, "show", f"{COMMIT}:NOTES.md"], capture_output=True, text=True, check=True).stdout
lines = text.splitlines()

def cells(l):
    return [c.strip() for c in l.strip().strip("|").split("|")]

def step_of(c):
    c = c.replace("*", "").strip()
    m = re.fullmatch(r"(?:Step\s+)?(\d+)", c)
    return int(m.group(1)) if m else None

tables = []  # (header_line_no, header, rows)
i = 0
while i < len(lines):
    if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|?$", lines[i + 1]):
        hdr = cells(lines[i]); j = i + 2; rows = []
        while j < len(lines) and lines[j].startswith("|"):
            rows.append(cells(lines[j])); j += 1
        tables.append((i + 1, hdr, rows)); i = j
    else:
        i += 1

picked = []
for ln, hdr, rows in tables:
    steps = [(step_of(r[0]), r) for r in rows]
    sr = [(s, r) for s, r in steps if s is not None]
    if hdr[0].replace("*", "").strip().lower() in ("step", "checkpoint") and len(sr) >= 8:
        picked.append((ln, hdr, sr))
picked = picked[:5]
res = []
for ln, hdr, sr in picked:
    pts = []
    for s, r in sr:
        v = r[1].replace("*", "").strip()
        m = re.fullmatch(r"([0-9.]+)%", v)
        assert m, (ln, r)
        pts.append((s, m.group(1)))
    res.append((ln, hdr, pts))
    print(ln, hdr[:2], len(pts))
ids = {463: None}
names = ["halfl_minerva_v3_base_math", "halfl_minerva_instruct_v1_math"]
assert len(res) == 2, len(res)
for (ln, hdr, pts), name in zip(res, names):
    with open(os.path.join(OUT, name + ".csv"), "w", newline="") as f:
        w = csv.writer(f); w.writerow(["step", "value"])
        for s, v in pts: w.writerow([s, v])
    print(name, "table header at NOTES.md line", ln, "n=", len(pts))
