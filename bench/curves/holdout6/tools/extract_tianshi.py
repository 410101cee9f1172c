#!/usr/bin/env python3
"""Extract eval_acc curves from Tianshi-Xu/assignment5-alignment GRPO console logs.
Selection rule (written before reading values): every root-level file named rl_*.log at the
pinned commit, sorted by name, cap 5; a file qualifies if, after restart handling, it has >= 8
'... batch N done, eval_acc: X' lines. Rows kept in file order; if N goes back (restart), keep only
rows from the last restart on."""
import subprocess, re, json, os, csv
REPO='Tianshi-Xu/assignment5-alignment'
MIR='/work/.mirror/Tianshi-Xu+assignment5-alignment/repo'
COMMIT='ea931474955950f829d7d42e2c3e29b9a698024f'
OUT=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
PAT=re.compile(r'(?:rollout|step) batch (\d+) done, eval_acc: ([0-9.eE+-]+)')
files=sorted(f for f in subprocess.run(['git','-C',MIR,'ls-tree','--name-only',COMMIT],capture_output=True,text=True).stdout.split() if re.fullmatch(r'rl_.*\.log',f))[:5]
frags=[]
for f in files:
    text=subprocess.run(['git','-C',MIR,'show',f'{COMMIT}:{f}'],capture_output=True).stdout.decode('utf-8','replace')
    rows=[(int(a),float(b)) for a,b in PAT.findall(text)]
    # restart handling
    start=0
    for i in range(1,len(rows)):
        if rows[i][0]<=rows[i-1][0]: start=i
    n_restarts=sum(1 for i in range(1,len(rows)) if rows[i][0]<=rows[i-1][0])
    rows=rows[start:]
    print(f, len(rows), 'restarts', n_restarts)
    if len(rows)<8: continue
    cid='tsxu_'+re.sub(r'[^a-z0-9]+','_',f[:-4].lower())
    with open(f'{OUT}/data/{cid}.csv','w',newline='') as fh:
        w=csv.writer(fh); w.writerow(['step','value']); w.writerows(rows)
    frags.append(dict(id=cid,file=f'data/{cid}.csv',source_repo=REPO,path=f,commit=COMMIT,
        url=f'https://github.com/{REPO}/blob/{COMMIT}/{f}',
        metric="eval_acc printed as '<rollout|step> batch N done, eval_acc: X' (fraction of validation MATH problems answered correctly, r1_zero answer reward)",
        model="SFT checkpoint of the CS336 a5 base model (config model_id 'sft_1024_correct'; assignment base is Qwen2.5-Math-1.5B) - exact checkpoint per run not recorded in the log",
        recipe="GRPO (CS336 assignment 5 own implementation, vLLM rollouts); config/rl.yml at this commit: rollout_batch_size 256, group_size 8, lr 1e-5, cliprange 0.2, 200 GRPO steps; per-run variant named by file (base / early_stop / clip_offpolicy)",
        dataset="MATH train (data/math_hf/train.jsonl) -> MATH validation/test split (data/math_hf/test.jsonl per config; eval values are multiples of 1/1024, i.e. ~1024 problems)",
        licence="no licence file: used as factual data for evaluation only",
        extraction="tools/extract_tianshi.py: regex over the log at the pinned commit; rows in file order; restart rule applied"+(f" ({n_restarts} restart(s); rows before the last restart dropped)" if n_restarts else ""),
        n_points=len(rows), x="GRPO step (rollout batch index)",
        notes="Selection: every root-level rl_*.log, sorted, cap 5, >=8 eval rows after restart handling. Same author/codebase for all tsxu_ curves; runs are separate trainings (different log files)."))
print(json.dumps(frags, indent=1))  # the manifest entries (../manifest.json holds them)
