"""Seconds per RL step (``train_step``: the preparation stage and ``Trainer.step``) on one fixed batch, for an
A/B of two checkouts.

The scalerl preset's model after its (cached) warm-up generates one batch of ``batch.prompts`` x
``batch.generations`` completions (zero-variance filter off, so every completion is trained on); the step is then
timed ``REPS`` times from the same weights. To compare two versions of scalerl, run it for each checkout in turn,
interleaved, on an idle machine, and take the ratio of the medians:

    for r in 1 2; do for tree in ../old-checkout .; do PYTHONPATH=$tree python bench/step_ab.py 1 6; done; done

    python bench/step_ab.py THREADS REPS [KEY=VALUE ...]      # overrides for the scalerl preset
"""
import statistics, sys, time, copy
import torch
from scalerl.config import load_config
from scalerl.build import build_model, build_task
from scalerl.pipeline.generator import GeneratorWorker
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.pipeline.prepare import StageConfig, train_step
from scalerl.trainer import Trainer
from scalerl.models.warmup import warmup

threads, reps = int(sys.argv[1]), int(sys.argv[2])
sets = sys.argv[3:]  # --set style overrides
torch.set_num_threads(threads)
cfg = load_config("scalerl", None, ["backend=inline", "algo.zero_variance_filter=false", *sets])
task = build_task(cfg.task)
bundle = build_model(cfg.model, cfg.seed)
warmup(bundle.model, bundle.tokenizer, task, cfg.warmup.resolved(bundle.pretrained), seed=cfg.seed)
gen = GeneratorWorker(cfg, task)
gen.load(0, bundle.model.state_dict())
from scalerl.rollout import Request
ids = [p.id for p in task.train_problems()][: cfg.batch.prompts]
torch.manual_seed(0)
batch = gen.generate([Request(0, ids, 123)])[0]
schedule = SCHEDULES.get(cfg.schedule.name, "s")(cfg.schedule.k)
state = copy.deepcopy(bundle.model.state_dict())
times = []
for r in range(reps):
    bundle.model.load_state_dict(state)
    tr = Trainer(bundle.model, cfg.algo, cfg.optim)
    stage = StageConfig.of(cfg.algo, schedule)
    t0 = time.perf_counter(); train_step(tr, batch, stage); times.append(time.perf_counter() - t0)
print(f"{sys.argv[0]} tree={__import__('scalerl').__file__} threads={threads} mean_len={batch.completion_lengths.float().mean():.1f} "
      f"step median={statistics.median(times[1:]):.3f}s min={min(times[1:]):.3f} max={max(times[1:]):.3f}")
