"""Audit leftovers: ``train/zero_var_frac`` describes the groups the zero-variance filter saw (§3.2, Fig. 6a; after
truncation, App. A.6, A.15); a mixture's overall ``val/pass_rate`` is the pooled mean over validation prompts (§2.1);
the efficiency claim (§3.1) needs a compute ratio beyond a stated margin; a resumed run reads ``metrics.jsonl`` once;
``ReadyBatches.settle`` refuses a batch never requested instead of spinning, and the Ray backend's ``close`` lets go
of the last published weights (on a stand-in ``ray`` module: no cluster needed, nor Ray itself)."""

from __future__ import annotations

import gc
import importlib.util
import json
import sys
import types
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from scalerl import algo
from scalerl.pipeline.prepare import StageConfig, prepare
from test_config_recipe_audit import _batch  # a batch of groups from their verdicts (and truncations)

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------- 1. train/zero_var_frac after truncation


def _stage(truncated: str, zv: bool = True) -> StageConfig:
    return StageConfig(max_staleness=4, zero_variance_filter=zv, advantage_norm="batch", advantage_eps=1e-6,
                       truncated=truncated)


def _groups_dropped_by_filter(before: torch.Tensor, after: torch.Tensor, group: torch.Tensor) -> float:
    """Of the groups with a sequence still kept before the filter, the share with none kept after it."""
    seen = torch.unique(group[before])
    left = torch.unique(group[after])
    return 1 - left.numel() / seen.numel()


def test_zero_var_frac_counts_the_groups_the_filter_saw_when_truncated_samples_are_excluded():
    # group 0: three correct and one truncated (its grader said wrong): excluded, the three left are all correct,
    # so the filter drops the group; group 1 is mixed and kept; group 2 is truncated whole, so the filter never
    # sees it. The filter dropped 1 of the 2 groups it saw (the old statistic, on every sample: 0 of 3)
    b = _batch([[True, True, True, False], [True, False, True, False], [False] * 4],
               [[False, False, False, True], [False] * 4, [True] * 4])
    before = ~b.truncated
    p = prepare(b, 0, _stage("exclude"))
    assert p.keep.tolist() == [False] * 4 + [True] * 4 + [False] * 4
    assert p.stats["train/zero_var_frac"] == pytest.approx(0.5)
    assert p.stats["train/zero_var_frac"] == pytest.approx(_groups_dropped_by_filter(before, p.keep, b.group))


def test_zero_var_frac_reads_a_truncated_sample_kept_for_training_as_incorrect():
    # ``truncated: train``: group 0's fourth sample hit the cap but the grader read a right answer in it; it is
    # trained as wrong (App. A.6), so the group is mixed and kept. The filter dropped none (old statistic: 1 of 2)
    b = _batch([[True] * 4, [True, False, True, False]], [[False, False, False, True], [False] * 4])
    p = prepare(b, 0, _stage("train"))
    assert p.keep.all()
    assert p.stats["train/zero_var_frac"] == 0.0


def test_zero_var_frac_with_the_filter_off_is_what_it_would_drop():
    b = _batch([[True, True, True, False], [True, False, True, False]], [[False, False, False, True], [False] * 4])
    p = prepare(b, 0, _stage("exclude", zv=False))
    assert p.keep.tolist() == [True, True, True, False] + [True] * 4  # only the truncated one left out
    assert p.stats["train/zero_var_frac"] == pytest.approx(0.5)
    assert algo.zero_variance_frac(torch.tensor([], dtype=torch.bool), torch.tensor([], dtype=torch.long)) == 0.0


# ----------------------------------------------- 2. a mixture's val/pass_rate: pooled over prompts (documented)


def test_mixture_val_pass_rate_is_the_mean_over_all_validation_prompts():
    """Not a defect (pinned): three prompts of domain ``a`` all right, one of ``b`` all wrong: 3/4 overall, the mean
    over the held-out prompts (§2.1), not the mean of the two domains' rates (1/2)."""
    from scalerl.evaluate import evaluate

    problems = [SimpleNamespace(id=f"{d}{i}", prompt=f"{d}{i}", meta={"domain": d})
                for d, i in [("a", 0), ("b", 0), ("a", 1), ("a", 2)]]
    task = SimpleNamespace(grade=lambda p, text: text == "right")

    class Engine:
        def generate(self, prompts, n, length, seed):
            return [[SimpleNamespace(text="right" if chr(p[0]) == "a" else "wrong", truncated=False)] * n
                    for p in prompts]

    res = evaluate(Engine(), lambda s: [ord(c) for c in s], task, problems, n_samples=3, length=None, seed=0)
    assert (res["val/a/pass_rate"], res["val/b/pass_rate"]) == (1.0, 0.0)
    assert res["val/pass_rate"] == 0.75 and res["val/n"] == 12.0


# -------------------------------------------------------------- 3. the efficiency claim needs a real margin


def _pooled(name: str, seeds: int = 2):
    from scalerl.experiments.claims import Pooled

    fit = SimpleNamespace(identified=True, A=0.7, B=2.0, Cmid=1.0, format_A=lambda: "0.700",
                          format_interval=lambda: "[0.690, 0.710]")
    return Pooled(name, fit, [fit] * seeds)


@pytest.mark.parametrize("ratios, verdict", [
    ([1.001, 1.001, 1.001], "inconclusive"),  # 0.1% less compute everywhere: a tie, not "yes"
    ([1 / 1.001, 1 / 1.001, 1 / 1.001], "inconclusive"),
    ([1.05, 1.05, 1.05], "inconclusive"),  # the boundary is within the margin
    ([1.12, 1.11, 1.13], "yes"),  # docs/RESULTS.md's magistral vs dapo_qwen
    ([1.12, 1.11, 1.001], "inconclusive"),  # one seed ties
    ([1 / 1.2, 1 / 1.1, 1 / 1.3], "no"),
    ([float("nan"), 1.2, 1.2], "inconclusive"),  # a refit without a midpoint
])
def test_efficiency_claim_reads_a_compute_ratio_within_the_margin_as_a_tie(monkeypatch, ratios, verdict):
    """Hand-worked: ``_cmid_at`` gives (Cmid of PipelineRL, Cmid of PPO, B, B) at the common A, pooled then per seed;
    PPO's Cmid over PipelineRL's is the compute ratio, a tie within ×(1 + COMPUTE_RATIO_MARGIN) = ×1.05."""
    from scalerl.experiments import claims

    calls = iter(ratios)
    monkeypatch.setattr(claims, "_cmid_at", lambda a, b: (1.0, next(calls), 2.0, 2.0))
    assert claims.efficiency_claim(_pooled("pipe"), _pooled("ppo")).verdict == verdict


def test_efficiency_claim_states_its_margin(monkeypatch):
    from scalerl.experiments import claims

    monkeypatch.setattr(claims, "_cmid_at", lambda a, b: (1.0, 1.001, 2.0, 2.0))
    numbers = claims.efficiency_claim(_pooled("pipe"), _pooled("ppo")).numbers
    assert "ppo needs 1.00x the compute of pipe" in numbers and "within x1.05 is a tie" in numbers


def test_within_ratio_is_the_relative_margin_both_ways():
    from scalerl.curves.compare import COMPUTE_RATIO_MARGIN, within_ratio

    assert COMPUTE_RATIO_MARGIN == 0.05
    assert within_ratio(1.0) and within_ratio(1.001) and within_ratio(1.05) and within_ratio(1 / 1.05)
    assert not within_ratio(1.051) and not within_ratio(1 / 1.051)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="compute ratio"):
            within_ratio(bad)


# ------------------------------------------------------------------ 4. a resumed run reads metrics.jsonl once


def test_resume_reads_metrics_once_and_replays_what_it_kept(tmp_path, monkeypatch):
    from scalerl import runlog
    from scalerl.runlog import METRICS, RunLog, read_metrics

    rows = [{"step": 0, "loss": 1.0}, {"step": 1, "loss": 0.9}, {"step": 1, "val/pass_rate": 0.3},
            {"step": 2, "loss": 0.8}, {"step": 2, "val/pass_rate": 0.4}, {"step": 3, "loss": 0.7}]
    (tmp_path / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "lo')
    reads = []
    real_read_text = Path.read_text

    def read_text(self: Path, *args, **kwargs):
        if self.name == METRICS:
            reads.append(self)
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    replayed = []
    monkeypatch.setattr(RunLog, "_scalars", lambda self, record: replayed.append(record))
    spy = []
    monkeypatch.setattr(runlog, "read_metrics", lambda run_dir: spy.append(run_dir) or read_metrics(run_dir))

    log = RunLog(tmp_path, resume=(2, 1))  # the evaluation of step 2 is not in the checkpoint: made again
    log.close()
    assert len(reads) == 1 and spy == []
    assert log.unlogged == [2]
    kept = read_metrics(tmp_path)
    assert kept == rows[:4]
    assert replayed == [r for r in kept if 2 <= r["step"] <= 2]  # purged from step 2, replayed to step 2


# ------------------------------------- 5. settle: a batch never requested; the Ray backend's close and weights


class Spun(AssertionError):
    """``settle`` kept collecting for a batch that could never come."""


def _guard(collect, limit: int = 50):
    calls = []

    def guarded(timeout: float) -> None:
        calls.append(timeout)
        if len(calls) > limit:
            raise Spun(f"settle called _collect {len(calls)} times")
        collect(timeout)

    return guarded


@pytest.fixture
def ray_backend_module(monkeypatch):
    """``scalerl/pipeline/ray_backend.py`` loaded under another name against a stand-in ``ray`` module (whether or
    not Ray is installed), so the backend's own bookkeeping runs with no cluster."""
    ray = types.ModuleType("ray")
    exceptions = types.ModuleType("ray.exceptions")
    exceptions.RayError = type("RayError", (Exception,), {})
    exceptions.GetTimeoutError = type("GetTimeoutError", (exceptions.RayError,), {})
    exceptions.RayActorError = type("RayActorError", (exceptions.RayError,), {})
    ray.exceptions = exceptions
    ray.method = lambda **kwargs: (lambda f: f)
    ray.is_initialized = lambda: False
    ray.kill = lambda actor, no_restart=True: None
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.exceptions", exceptions)
    spec = importlib.util.spec_from_file_location("_ray_backend_without_ray",
                                                  ROOT / "scalerl" / "pipeline" / "ray_backend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bare_ray_backend(module):
    """A RayBackend with no actors (``__init__`` would start a cluster): the state ``submit`` and ``publish`` leave."""
    from scalerl.pipeline.ready import ReadyBatches

    b = object.__new__(module.RayBackend)
    ReadyBatches.__init__(b)
    b.requests, b._inflight, b.actors, b._owns_ray = {}, {}, [], False
    return b


def test_ray_settle_refuses_a_batch_never_requested(ray_backend_module):
    b = _bare_ray_backend(ray_backend_module)
    b.ready[0] = SimpleNamespace(index=0)
    b._collect = _guard(b._collect)  # nothing in flight: the real _collect returns at once
    with pytest.raises(RuntimeError, match=r"batches \[5\].*never requested"):
        b.settle([0, 5])


def test_ray_settle_still_waits_for_a_batch_under_way(ray_backend_module):
    b = _bare_ray_backend(ray_backend_module)
    b.requests[1] = {"index": 1}
    arrivals = iter([None, None, SimpleNamespace(index=1)])

    def collect(timeout: float) -> None:
        batch = next(arrivals, None)
        if batch is not None:
            b.ready[batch.index] = batch
            b.requests.pop(batch.index)

    b._collect = _guard(collect)
    assert [x.index for x in b.settle([1])] == [1]


def test_ready_batches_settle_asks_the_backend_what_is_coming():
    from scalerl.pipeline.ready import ReadyBatches

    class Elsewhere(ReadyBatches):
        concurrent = True

        def _coming(self, index: int) -> bool:
            return index == 1

    b = Elsewhere()
    b._collect = _guard(lambda timeout: b.ready.setdefault(1, SimpleNamespace(index=1)))
    assert [x.index for x in b.settle([1])] == [1]
    with pytest.raises(RuntimeError, match="never requested"):
        b.settle([1, 2])
    assert ReadyBatches().settle([7]) == []  # a backend generating in this process waits for nothing


def test_ray_close_lets_go_of_the_last_published_weights(ray_backend_module):
    class Weights:
        pass

    b = _bare_ray_backend(ray_backend_module)
    w = Weights()
    alive = weakref.ref(w)
    b._weights = (w, 3)
    b._new_actor = lambda: ("actor on", b._weights)
    del w
    b.close()
    gc.collect()
    assert alive() is None
    b.close()  # twice does nothing more



def test_process_backend_settle_refuses_a_batch_never_submitted():
    """The local process backend knows what it submitted: a batch it never asked for is an error, not a wait of
    one second per check that never ends; a submitted one is waited for."""
    from scalerl.pipeline.backends import ProcessBackend

    b = ProcessBackend.__new__(ProcessBackend)
    b.ready, b.submitted, b.concurrent = {}, {4: {"index": 4}}, True
    b._collect = _guard(lambda timeout: b.ready.setdefault(4, SimpleNamespace(index=4)))
    assert [x.index for x in b.settle([4])] == [4]
    b.ready.clear()
    with pytest.raises(RuntimeError, match=r"\[9\]"):
        b.settle([4, 9])


def test_a_resumed_run_knows_its_evaluations_from_the_lines_it_kept(tmp_path):
    """RunLog.kept is what metrics.jsonl holds after a resume's truncation (the runner reads its last evaluation
    step there, not from the file a third time); a new run keeps nothing."""
    from scalerl.runlog import METRICS, RunLog, read_metrics

    rows = [{"step": 0, "val/pass_rate": 0.1}, {"step": 1, "loss": 1.0}, {"step": 2, "val/pass_rate": 0.2},
            {"step": 3, "loss": 0.5}]
    (tmp_path / METRICS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = RunLog(tmp_path, tensorboard=False, resume=(2, 2))
    assert log.kept == read_metrics(tmp_path) == rows[:3]
    assert RunLog(tmp_path / "new", tensorboard=False).kept == []
