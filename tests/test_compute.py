"""The compute meter (App. A.3, §3.1, A.11): every device the run holds × the training wall clock (evaluation
and checkpoint pauses left out), generation FLOPs for every generated token, training FLOPs for trained tokens
only; the same rules for PipelineRL and PPO-off-policy."""

import queue
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from scalerl.compute import ComputeMeter


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_compute_meter_hand_values():
    clock = FakeClock()
    m = ComputeMeter(n_params=1000, devices=3, clock=clock)
    m.start()
    clock.now = 600.0
    with m.paused():  # an evaluation: 5000 s not metered
        clock.now = 5600.0
    clock.now = 6200.0
    m.stop()
    clock.now = 9000.0  # stopped: not metered
    m.add_generation(1800.0, prompt_tokens=10, completion_tokens=20)  # busy time is a diagnostic, not compute
    m.add_training(900.0, trained_tokens=12)  # a filtered group's 18 tokens were generated, not trained
    assert m.wall == 1200.0
    assert m.device_hours == 1.0  # 3 devices x 1200 s, idle or not
    assert m.flops == 2 * 1000 * 30 + 6 * 1000 * 12
    assert m.tokens == 20
    m2 = ComputeMeter(n_params=1, devices=3)
    m2.load_state_dict(m.state_dict())
    assert m2.metrics() == m.metrics()


class _Recorder:
    """Scripted work of one run: G seconds of generation per batch, T seconds per optimizer step, E per evaluation,
    C per checkpoint, with the start and end of every generate call and every step."""

    def __init__(self, G: float, T: float) -> None:
        self.G, self.T = G, T
        self.gen: list[tuple[float, float, list[int]]] = []
        self.train: list[tuple[float, float, int]] = []
        self.evals: list[tuple[float, float]] = []


def _tiny_batch(index: int, problem_ids: list[str], seconds: float):
    from scalerl.rollout import RolloutBatch

    n = len(problem_ids)
    ones = torch.ones(n, 2, dtype=torch.bool)
    z = torch.zeros(n)
    return RolloutBatch(index=index, problem_ids=problem_ids, group=torch.arange(n), input_ids=ones.long(),
                        attention_mask=ones, loss_mask=ones.float(), gen_logprobs=ones.float(), versions=ones.long(),
                        rewards=z, correct=z.bool(), truncated=z.bool(), interrupted=z.bool(),
                        completion_lengths=torch.ones(n, dtype=torch.long), gen_seconds=seconds)


def _scripted_run(tmp_path, schedule_name: str, k: int, steps: int, rec: _Recorder, E: float, C: float,
                  eval_every: int = 4) -> dict:
    """The real driver loop (``RunLoop``), the real local backend and schedule, with scripted generator and trainer
    work: the generator runs in a thread instead of a process (same queues, same weight channel). The steps wait
    for each evaluation (no stop rule, ``overlap`` off)."""
    from scalerl.algo.curriculum import CURRICULA
    from scalerl.config import load_config
    from scalerl.forecast import Forecaster
    from scalerl.pipeline.backends import ProcessBackend, backend_devices
    from scalerl.pipeline.runner import RunLoop
    from scalerl.pipeline.schedules import SCHEDULES
    from scalerl.pipeline.state import RunState
    from scalerl.pipeline.weights import WeightChannel
    from scalerl.runlog import read_metrics

    cfg = load_config("scalerl", None, ["backend=local", f"schedule.name={schedule_name}", f"schedule.k={k}",
                                        f"steps={steps}", f"eval.every={eval_every}", "checkpoint_every=4",
                                        "batch.prompts=2"])
    schedule = SCHEDULES.get(schedule_name)(k)

    class Worker:
        def __init__(self, cfg) -> None:
            self.version = -1

        def load(self, version, weights) -> None:
            self.version = version

        def generate(self, requests, weight_source=None):
            t0 = time.perf_counter()
            time.sleep(rec.G * len(requests))  # the whole group in one call (PPO-off-policy: k x B prompts)
            rec.gen.append((t0, time.perf_counter(), [r.index for r in requests]))
            return [_tiny_batch(r.index, r.problem_ids, rec.G) for r in requests]

    class Ranks:
        world = 1

        def step(self, trainer, batch, stage):
            t0 = time.perf_counter()
            time.sleep(rec.T)
            rec.train.append((t0, time.perf_counter(), batch.index))
            trainer.version += 1
            return {"train/tokens_kept": 2.0}

        def weights(self, model):
            return {}

        def refresh(self, eval_model, model) -> None:
            pass

    class Loop(RunLoop):
        def _save(self, ready) -> None:
            time.sleep(C)

    class Evaluation:
        task = None

        def __call__(self, seed):
            t0 = time.perf_counter()
            time.sleep(E)
            rec.evals.append((t0, time.perf_counter()))
            return {"val/pass_rate": 0.5}

    ctx = SimpleNamespace(Queue=queue.Queue, Process=threading.Thread)  # the generator "process" as a thread
    backend = ProcessBackend(cfg, schedule, WeightChannel({}, version=0), ctx, threads=torch.get_num_threads(),
                             make_worker=Worker)
    state = RunState(curriculum=CURRICULA.get("uniform")([f"p{i}" for i in range(10)], 0),
                     meter=ComputeMeter(n_params=1, devices=backend_devices(cfg)), forecaster=Forecaster(cfg.forecast))
    log = SimpleNamespace(rows=[], log=lambda r: log.rows.append(r), consumed=lambda *a: None, kept=[])
    display = SimpleNamespace(start=lambda *a: None, step=lambda r: None, eval=lambda r: None)
    trainer = SimpleNamespace(version=0, timings={})
    loop = Loop(cfg, tmp_path, Ranks(), state, schedule, trainer, None, None, Evaluation(), backend, log, display, {})
    try:
        loop.run({}, fresh=True)
    finally:
        backend.close()
    assert read_metrics(tmp_path) == []  # the fake log wrote nothing there
    return log.rows[-1]


def test_pipeline_rl_costs_less_than_ppo_off_policy_from_wall_time_alone(tmp_path):
    """§3.1, App. A.11: on the same scripted work (generation 0.15 s a batch, an optimizer step 0.15 s, k = 4,
    8 steps) PPO-off-policy-k generates the whole k-batch group, then takes the k updates, generation and
    training alternating; PipelineRL-k overlaps them. Metered as devices × wall clock, PPO-off-policy costs
    about (8·(G+T)) / (G + 8·T) = 1.8x PipelineRL (the old busy-time meter charged both 8·(G+T): 1.0x).
    Evaluation and checkpoint pauses (0.4 s, 0.1 s) are left out of both."""
    E, C = 0.4, 0.1
    rows, recs = {}, {}
    for name in ("pipeline_rl", "ppo_off_policy"):
        recs[name] = _Recorder(G=0.15, T=0.15)
        rows[name] = _scripted_run(tmp_path / name, name, 4, 8, recs[name], E, C)
    for name, row in rows.items():
        assert row["step"] == 8
        assert row["compute/device_hours"] * 3600 == pytest.approx(2 * row["compute/wall_s"])  # local: 2 devices
        assert row["compute/wall_s"] < row["time/wall_s"] - 3 * E  # three evaluations (steps 0, 4, 8) left out
    ppo = recs["ppo_off_policy"]
    # PPO-off-policy alternates: a group's generation starts only once the previous group's last step is done
    for start, _, indices in ppo.gen:
        assert indices == list(range(indices[0], indices[0] + 4))  # the whole k-batch group in one call
        assert all(start >= end for _, end, b in ppo.train if b < indices[0])
    # PipelineRL overlaps: some generation ran while the trainer was stepping
    pipe = recs["pipeline_rl"]
    assert any(g0 < t1 and t0 < g1 for g0, g1, _ in pipe.gen for t0, t1, _ in pipe.train)
    ratio = rows["ppo_off_policy"]["compute/device_hours"] / rows["pipeline_rl"]["compute/device_hours"]
    assert ratio > 1.4, ratio


def test_no_generation_runs_while_the_trainer_waits_for_an_evaluation(tmp_path):
    """App. A.3: compute is every device × the training wall clock, evaluation pauses left out. A generator that
    kept working in a pause would do training work unmetered: a PipelineRL-4 run whose generation is the
    bottleneck (0.1 s a batch, steps 0.02 s) found its next batches made during each 0.5 s pause and metered
    0.35x as much when it evaluated every 2 steps as when it evaluated only at the ends. Held
    (``Backend.hold``), no generation starts in a pause; a batch under way that the trainer waits for finishes
    first (metered), and the two meter the same, within the scripted work's jitter."""
    E, C = 0.5, 0.0
    rows = {}
    for every in (2, 100):
        rec = _Recorder(G=0.1, T=0.02)
        rows[every] = _scripted_run(tmp_path / str(every), "pipeline_rl", 4, 12, rec, E, C, eval_every=every)
        assert len(rec.evals) == (7 if every == 2 else 2)
        # 20 ms: a call that had passed the hold check just before the pause began
        late = [(g0, e0) for g0, _, _ in rec.gen for e0, e1 in rec.evals if e0 + 0.02 < g0 < e1]
        assert late == []
    often, ends = rows[2]["compute/wall_s"], rows[100]["compute/wall_s"]
    assert often == pytest.approx(ends, rel=0.15)


@pytest.mark.parametrize("schedule", ["pipeline_rl", "ppo_off_policy"])
def test_both_schedules_are_metered_the_same_way(tmp_path, schedule):
    """Same work (4 batches, zero-variance filter on) under each schedule: device time is the run's device
    (inline: one) times its training wall clock, evaluations left out; the generator's busy time is still
    reported; FLOPs charge generation for every generated token (dropped groups included) and training only
    for the kept ones."""
    from test_pipeline import micro

    from scalerl.build import build_model
    from scalerl.pipeline.runner import train
    from scalerl.runlog import read_metrics

    cfg = micro("backend=inline", "steps=4", f"schedule.name={schedule}", "schedule.k=2", "eval.every=2",
                "algo.zero_variance_filter=true", "checkpoint_every=100")
    train(cfg, tmp_path, show_progress=False)
    lines = [r for r in read_metrics(tmp_path) if "loss" in r]
    last = lines[-1]
    P = build_model(cfg.model, 0).spec["n_params"]
    gen_s = sum(r["throughput/gen_seconds"] for r in lines)
    assert last["compute/gen_seconds"] == pytest.approx(gen_s)
    assert last["compute/device_hours"] * 3600 == pytest.approx(last["compute/wall_s"])  # inline: one device
    assert last["compute/wall_s"] >= 0.95 * (last["compute/gen_seconds"] + last["compute/train_seconds"])
    assert last["compute/wall_s"] < last["time/wall_s"]  # the evaluations at steps 0 and 2 are left out
    trained = sum(r["train/tokens_kept"] for r in lines)
    gen_tokens = (last["compute/flops"] - 6 * P * trained) / (2 * P)
    assert gen_tokens >= last["compute/tokens"] + 4 * cfg.batch.prompts * len(lines)  # + each group's prompt once
    dropped = sum(r["train/samples"] - r["train/samples_kept"] for r in lines)
    if dropped:  # filtered groups were generated (charged 2P per token) but not trained (no 6P)
        assert trained < gen_tokens


def test_prompt_tokens_count_each_groups_prompt_once():
    """The FLOP meter charges each group's prompt once (the engines prefill a distinct prompt once and share its
    cache among the group's samples): two groups with prompts of 3 and 2 tokens, 2 samples each -> 5."""
    import torch

    from scalerl.rollout import RolloutBatch

    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    comp = torch.tensor([2, 1, 4, 1])
    z = torch.zeros(4)
    batch = RolloutBatch(index=0, problem_ids=["a", "b"], group=torch.tensor([0, 0, 1, 1]), input_ids=mask.long(),
                         attention_mask=mask, loss_mask=mask.float(), gen_logprobs=mask.float(), versions=mask.long(),
                         rewards=z, correct=z.bool(), truncated=z.bool(), interrupted=z.bool(), completion_lengths=comp)
    assert batch.prompt_tokens() == 3 + 2
