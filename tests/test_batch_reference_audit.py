"""Audit of the path from generations to a training batch, and of the off-policy schedules, against references
written here in plain Python/NumPy from the paper's formulas (spec §3.1, §3.2, §3.4-3.6, §3.8, App. A.6/A.15):

* advantages (Eq. 5-7 baseline, batch-level ``Â/Â_std`` of §3.5, prompt-level, none) after the truncation and
  zero-variance steps of ``pipeline/prepare.py``, on hand-made batches with groups of size G;
* loss masks (prompt, padding, forced interruption tokens, truncated samples) from ``generator.collate`` and the
  token counts each aggregation (§3.4) normalises by, on uneven lengths, through the trainer's real step;
* the importance ratio's alignment (Eq. 2): a bigram model whose logits are a table we control, so the log-prob of
  token t+1 under the logits at t is known exactly, on the plain and the shared-prefix forward;
* the schedules (§3.1): which batch is issued at which trainer version, PPO-off-policy-k's whole groups, and a
  resume in the middle of a PPO group (after a crash, and after a ``steps`` budget cut inside the group);
* the length penalty (Eq. 9) at the boundaries L_max − L_cache and L_max.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from scalerl import algo
from scalerl.algo.length_control import LengthControl, LengthPenalty
from scalerl.compute import ComputeMeter
from scalerl.config import CurriculumConfig, ForecastConfig, load_config
from scalerl.engines.base import Sample
from scalerl.forecast import Forecaster
from scalerl.pipeline.generator import collate
from scalerl.pipeline.prepare import StageConfig, prepare, train_step
from scalerl.pipeline.ready import generate_on_schedule
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.pipeline.state import RunState
from scalerl.pipeline.weights import WeightChannel
from scalerl.rollout import Request, RolloutBatch
from scalerl.trainer import Trainer, policy_logprobs

# ---------------------------------------------------------------------------------------------- references


def ref_keep(correct, group, truncated, *, zero_variance: bool, truncated_mode: str = "exclude") -> list[bool]:
    """Which sequences reach the loss: truncated ones out (App. A.15) unless trained on; then groups whose kept
    sequences are all correct or all incorrect out (§3.6, ``0 < mean < 1`` on correctness; a truncated sequence
    trained on is a wrong answer, as its reward is the incorrect one)."""
    keep = [not (t and truncated_mode == "exclude") for t in truncated]
    if zero_variance:
        for g in set(group):
            rows = [i for i in range(len(group)) if group[i] == g and keep[i]]
            if len({bool(correct[i]) and not truncated[i] for i in rows}) <= 1:
                for i in rows:
                    keep[i] = False
    return keep


def ref_advantages(rewards, group, keep, norm: str, eps: float) -> np.ndarray:
    """§3.2/§3.5 on the kept sequences: Â_i = r_i − mean_group(r); batch: Â / (std of all Â + eps); prompt:
    Â / (std_group(r) + eps); none: Â. Population stds (the ``std({r_j})`` of Eq. 5)."""
    rows = [i for i in range(len(rewards)) if keep[i]]
    r = np.array([rewards[i] for i in rows], dtype=np.float64)
    g = [group[i] for i in rows]
    centred = np.empty_like(r)
    gstd = np.empty_like(r)
    for gid in set(g):
        idx = [j for j in range(len(g)) if g[j] == gid]
        centred[idx] = r[idx] - r[idx].mean()
        gstd[idx] = r[idx].std()
    if norm == "batch":
        return centred / (centred.std() + eps)
    if norm == "prompt":
        return centred / (gstd + eps)
    return centred


def ref_aggregate(terms: list[list[float]], group: list[int], how: str) -> float:
    """§3.4, with ``terms[i]`` the per-token terms of sequence i's trained tokens only: prompt = mean over prompts
    of (sum over the prompt's tokens / number of them); sample = mean over sequences of their token means; token =
    mean over every token. Units with no token are left out."""
    if how == "token":
        flat = [x for t in terms for x in t]
        return sum(flat) / len(flat)
    if how == "sample":
        means = [sum(t) / len(t) for t in terms if t]
        return sum(means) / len(means)
    per_prompt = []
    for g in sorted(set(group)):
        toks = [x for i, t in enumerate(terms) if group[i] == g for x in t]
        if toks:
            per_prompt.append(sum(toks) / len(toks))
    return sum(per_prompt) / len(per_prompt)


def ref_length_penalty(length: int, l_max: float, l_cache: float) -> float:
    """Eq. 9 written piecewise (DAPO): 0 up to L_max − L_cache, linear to −1 at L_max, −1 beyond."""
    if length <= l_max - l_cache:
        return 0.0
    if length <= l_max:
        return (l_max - l_cache - length) / l_cache
    return -1.0


# ---------------------------------------------------------------------------------------------- a controlled model

V = 12


class Bigram(nn.Module):
    """Logits at position t are ``table[x_t]`` (a linear head over the one-hot token): the log-prob of token t+1
    is ``log_softmax(table[x_t])[x_{t+1}]``, known exactly. An off-by-one reads another row of the table."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.lm_head = nn.Linear(V, V)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.randn(V, V, generator=g) * 2)
            self.lm_head.bias.copy_(torch.randn(V, generator=g))

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.lm_head(F.one_hot(input_ids, V).float())

    def table(self) -> np.ndarray:
        """log_softmax of the logits after each token, [V, V] (row: the token at t; column: token t+1)."""
        with torch.no_grad():
            logits = self.lm_head(torch.eye(V)).double()
        return torch.log_softmax(logits, -1).numpy()


class PrefixedBigram(Bigram):
    """The same model with the shared-prefix forward the trainer uses for models that have one."""

    def forward_prefixed(self, prompt_ids, prompt_mask, ids, group):
        last = self.lm_head(F.one_hot(prompt_ids[:, -1], V).float())  # left-padded: the last column is real
        return last, self.lm_head(F.one_hot(ids, V).float())


def _sample(prompt, completion, *, forced=(), truncated=False, version=0, table=None, shift=0.0):
    """A generator sample: generator log-probs from ``table`` (exact) plus ``shift`` on sampled tokens, 0 on
    forced ones (what the engine records)."""
    ctx = list(prompt) + list(completion)
    lps, flags = [], []
    for j, tok in enumerate(completion):
        f = j in forced
        flags.append(f)
        prev = ctx[len(prompt) + j - 1]
        lps.append(0.0 if f or table is None else float(table[prev, tok]) + shift * ((j % 3) - 1))
    return Sample(prompt_tokens=list(prompt), tokens=list(completion), logprobs=lps,
                  versions=[version] * len(completion), forced=flags, truncated=truncated,
                  interrupted=bool(forced), finished=not truncated)


def _hand_batch(table=None, shift=0.0, version=0):
    """Three prompts × G=4, uneven lengths. Prompt 0 (tokens 1 2 3): mixed verdicts, sample 1 has two forced
    (interruption) tokens; prompt 1 (4 5): sample 2 truncated, and the only incorrect one, so with it left out the
    group is all correct (zero-variance); prompt 2 (6): mixed, sample 3 truncated though graded correct (its
    answer came before the cap)."""
    P = [[1, 2, 3], [4, 5], [6]]
    comps = [
        [[7, 8, 9], [8, 9, 10, 11, 7, 8], [9], [10, 11]],
        [[7], [8, 8], [9, 10, 11, 11, 10], [11, 7, 8]],
        [[10, 9, 8, 7], [7, 7], [8], [9, 10, 11, 7, 8, 9, 10]],
    ]
    forced = {(0, 1): (2, 3)}
    trunc = {(1, 2), (2, 3)}
    verdicts = [[True, False, True, False], [True, True, False, True], [False, True, True, True]]
    samples = [[_sample(P[g], c, forced=forced.get((g, i), ()), truncated=(g, i) in trunc, version=version,
                        table=table, shift=shift) for i, c in enumerate(cs)] for g, cs in enumerate(comps)]
    problems = [SimpleNamespace(id=f"p{g}") for g in range(3)]
    b = collate(Request(0, [p.id for p in problems], 0), problems, samples, verdicts, pad_id=0, reward_correct=1.0,
                reward_incorrect=-1.0, length_control=LengthControl())
    return b, samples, verdicts


# ---------------------------------------------------------------------------------------------- advantages


def _random_batch(groups: int, G: int, seed: int) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    n = groups * G
    correct = torch.rand(n, generator=g) < 0.5
    correct[:G] = True  # group 0 all correct
    correct[G:2 * G] = False  # group 1 all incorrect
    t = 3
    return RolloutBatch(
        index=0, problem_ids=[f"p{i}" for i in range(groups)], group=torch.arange(n) // G,
        input_ids=torch.ones(n, t, dtype=torch.long), attention_mask=torch.ones(n, t, dtype=torch.bool),
        loss_mask=torch.tensor([[0.0, 1.0, 1.0]]).repeat(n, 1), gen_logprobs=torch.zeros(n, t),
        versions=torch.zeros(n, t, dtype=torch.long), rewards=torch.where(correct, 1.0, -1.0), correct=correct,
        truncated=torch.rand(n, generator=g) < 0.15, interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=torch.full((n,), 2),
    )


@pytest.mark.parametrize("norm", ["batch", "prompt", "none"])
@pytest.mark.parametrize("zero_variance", [True, False])
@pytest.mark.parametrize("truncated_mode", ["exclude", "train"])
@pytest.mark.parametrize("G,seed", [(2, 0), (4, 1), (8, 2), (16, 3)])
def test_prepare_keeps_and_advantages_equal_the_reference(norm, zero_variance, truncated_mode, G, seed):
    b = _random_batch(groups=6, G=G, seed=seed)
    cfg = StageConfig(max_staleness=2, zero_variance_filter=zero_variance, advantage_norm=norm, advantage_eps=1e-6,
                      truncated=truncated_mode)
    p = prepare(b, 0, cfg)
    args = (b.correct.tolist(), b.group.tolist(), b.truncated.tolist())
    keep = ref_keep(*args, zero_variance=zero_variance, truncated_mode=truncated_mode)
    assert p.keep.tolist() == keep
    expected = ref_advantages(b.rewards.tolist(), b.group.tolist(), keep, norm, 1e-6)
    np.testing.assert_allclose(p.advantages.double().numpy(), expected, rtol=1e-6, atol=1e-6)


def test_batch_level_advantages_on_hand_worked_numbers():
    """G = 4: group 0 [+1 −1 −1 −1], group 1 all correct (dropped), group 2 [+1 +1 −1 −1]. Kept Â: 1.5, −.5, −.5,
    −.5, 1, 1, −1, −1; their population std is sqrt(7/8); the dropped group's zeros are not in it (§3.5, taken
    after filtering: the order ``prepare`` documents)."""
    r = [1, -1, -1, -1, 1, 1, 1, 1, 1, 1, -1, -1]
    b = _random_batch(groups=3, G=4, seed=0)
    b.rewards = torch.tensor(r, dtype=torch.float32)
    b.correct = b.rewards > 0
    b.truncated[:] = False
    p = prepare(b, 0, StageConfig(2, True, "batch", 0.0))
    s = (7 / 8) ** 0.5
    assert p.keep.tolist() == [True] * 4 + [False] * 4 + [True] * 4
    np.testing.assert_allclose(p.advantages.numpy(), np.array([1.5, -.5, -.5, -.5, 1, 1, -1, -1]) / s, rtol=1e-6)
    prompt = prepare(b, 0, StageConfig(2, True, "prompt", 0.0))  # GRPO: group 0 std sqrt(3)/2, group 2 std 1
    np.testing.assert_allclose(prompt.advantages.numpy(),
                               [1.5 / 0.75 ** .5, -.5 / 0.75 ** .5, -.5 / 0.75 ** .5, -.5 / 0.75 ** .5, 1, 1, -1, -1],
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------------- masks and the update


def test_collate_masks_prompt_padding_and_forced_tokens_and_records_versions():
    b, samples, _ = _hand_batch(version=3)
    flat = [s for g in samples for s in g]
    for i, s in enumerate(flat):
        p, c = len(s.prompt_tokens), len(s.tokens)
        expected = [0.0] * p + [0.0 if f else 1.0 for f in s.forced] + [0.0] * (b.input_ids.shape[1] - p - c)
        assert b.loss_mask[i].tolist() == expected, i
        assert b.input_ids[i, p:p + c].tolist() == s.tokens
        assert b.versions[i].tolist() == [-1] * p + [3] * c + [-1] * (b.input_ids.shape[1] - p - c)
        assert int(b.completion_lengths[i]) == c and int(b.prompt_lengths()[i]) == p
    assert b.truncated.tolist() == [s.truncated for s in flat]


@pytest.mark.parametrize("model_cls", [Bigram, PrefixedBigram])
def test_trainer_log_probs_are_the_taken_tokens_under_the_previous_positions_logits(model_cls):
    """Column t of ``policy_logprobs`` is token t+1 under the logits at t, on the plain and the shared-prefix
    forward, for every sampled token of an uneven, padded batch."""
    model = model_cls()
    table = model.table()
    b, samples, _ = _hand_batch()
    logp, _ = policy_logprobs(model, b, bf16=False)
    mask = b.loss_mask[:, 1:] > 0
    ids = b.input_ids.tolist()
    expected = torch.zeros_like(logp, dtype=torch.float64)
    for i in range(b.n):
        for t in range(b.input_ids.shape[1] - 1):
            expected[i, t] = table[ids[i][t], ids[i][t + 1]]
    torch.testing.assert_close(logp.double()[mask], expected[mask], rtol=0, atol=1e-5)
    # and the generator's log-probs sit at the token's own column: column t of gen_logprobs[:, 1:] is token t+1
    exact, _, _ = _hand_batch(table=table)
    torch.testing.assert_close(exact.gen_logprobs[:, 1:].double()[mask], expected[mask], rtol=0, atol=1e-6)


@pytest.mark.parametrize("model_cls", [Bigram, PrefixedBigram])
def test_importance_ratios_are_one_when_the_generator_is_the_trained_policy(model_cls):
    """Eq. 2 with π_gen = π_train: every ρ is 1 (max and min), whatever the layout; the same batch with the
    generator's log-probs one token off gives ratios far from 1 (the check bites)."""
    cfg = load_config("scalerl", None, ["optim.grad_clip=1e9"])
    model = model_cls()
    b, _, _ = _hand_batch(table=model.table())
    stats = train_step(Trainer(model, cfg.algo, cfg.optim), b, StageConfig(2, True, "batch", 1e-6))
    assert stats["train/is_ratio_max"] == pytest.approx(1.0, abs=1e-5)
    assert stats["train/is_ratio_min"] == pytest.approx(1.0, abs=1e-5)
    off, _, _ = _hand_batch(table=model.table())
    off.gen_logprobs = torch.roll(off.gen_logprobs, 1, dims=1)
    stats = train_step(Trainer(model_cls(), cfg.algo, cfg.optim), off, StageConfig(2, True, "batch", 1e-6))
    assert abs(stats["train/is_ratio_max"] - 1) > 0.1 or abs(stats["train/is_ratio_min"] - 1) > 0.1


@pytest.mark.parametrize("preset,sets", [
    ("scalerl", []),  # CISPO, prompt-level aggregation, batch advantages
    ("scalerl", ["algo.aggregation=sample"]),
    ("scalerl", ["algo.aggregation=token"]),
    ("grpo_deepseek", []),  # clipped ratio, sample-level, prompt-level advantages
    ("dapo_qwen", []),
])
def test_the_step_equals_the_reference_objective_on_uneven_lengths(preset, sets):
    """The whole stage + trainer step on the hand batch against the objective written out: kept sequences,
    advantages, ρ = π_train/π_gen per sampled token, the loss's per-token term, and each aggregation's token
    counts (forced tokens, padding, prompts and truncated samples never counted)."""
    cfg = load_config(preset, None, ["optim.grad_clip=1e9", *sets])
    model = Bigram(seed=1)
    table = model.table()
    b, samples, verdicts = _hand_batch(table=table, shift=0.2)
    stage = StageConfig(2, cfg.algo.zero_variance_filter, cfg.algo.advantages.norm, cfg.algo.advantages.eps,
                        truncated=cfg.algo.truncated)
    stats = train_step(Trainer(model, cfg.algo, cfg.optim), b, stage)

    flat = [s for g in samples for s in g]
    group = [g for g, ss in enumerate(samples) for _ in ss]
    correct = [c for vs in verdicts for c in vs]
    keep = ref_keep(correct, group, [s.truncated for s in flat], zero_variance=cfg.algo.zero_variance_filter,
                    truncated_mode=cfg.algo.truncated)
    adv = ref_advantages([1.0 if c else -1.0 for c in correct], group, keep, cfg.algo.advantages.norm,
                         cfg.algo.advantages.eps)
    params = cfg.algo.loss.params
    terms, kept_groups, n_tokens = [], [], 0
    for a, i in zip(adv, [i for i in range(len(flat)) if keep[i]]):
        s = flat[i]
        ctx = s.prompt_tokens + s.tokens
        seq = []
        for j, tok in enumerate(s.tokens):
            if s.forced[j]:
                continue
            logp = table[ctx[len(s.prompt_tokens) + j - 1], tok]
            rho = float(np.exp(logp - s.logprobs[j]))
            if cfg.algo.loss.name == "cispo":  # −sg(min(ρ, ε_max))·Â·log π (Eq. 4)
                seq.append(-min(rho, params.eps_max) * a * logp)
            else:  # −min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â) (Eq. 3, 8)
                seq.append(-min(rho * a, min(max(rho, 1 - params.eps_low), 1 + params.eps_high) * a))
        n_tokens += len(seq)
        terms.append(seq)
        kept_groups.append(group[i])
    assert stats["train/samples_kept"] == sum(keep)
    assert n_tokens == int(b.select(torch.tensor(keep)).loss_mask.sum())
    assert stats["loss"] == pytest.approx(ref_aggregate(terms, kept_groups, cfg.algo.aggregation), rel=1e-5, abs=1e-7)


def test_aggregation_denominators_count_only_trained_tokens():
    """The hand batch with ScaleRL's defaults keeps prompt 0 (3 + 4 + 1 + 2 sampled tokens: sample 1's two forced
    ones out) and prompt 2's samples 0-2 (4 + 2 + 1; sample 3 truncated), prompt 1 being all correct once its
    truncated sample is out. With every per-token term 1 the three aggregations are all 1; with term = the
    token count of its own prompt, prompt-level is the mean of the two counts and token-level their weighted
    mean: the denominators are 10 and 7 tokens."""
    b, _, _ = _hand_batch()
    p = prepare(b, 0, StageConfig(2, True, "batch", 1e-6))
    assert p.keep.tolist() == [True] * 4 + [False] * 4 + [True, True, True, False]
    k = b.select(p.keep)
    mask = k.loss_mask
    per_prompt = mask.sum(1).tolist()
    assert per_prompt == [3.0, 4.0, 1.0, 2.0, 4.0, 2.0, 1.0]
    counts = {0: 10.0, 2: 7.0}
    terms = torch.tensor([counts[int(g)] for g in k.group])[:, None] * mask
    assert float(algo.AGGREGATIONS.get("prompt")(terms, mask, k.group)) == pytest.approx((10 + 7) / 2)
    assert float(algo.AGGREGATIONS.get("token")(terms, mask, k.group)) == pytest.approx((10 * 10 + 7 * 7) / 17)
    assert float(algo.AGGREGATIONS.get("sample")(terms, mask, k.group)) == pytest.approx((4 * 10 + 3 * 7) / 7)


# ---------------------------------------------------------------------------------------------- schedules


def _run_state(ids: int = 40) -> RunState:
    return RunState(curriculum=algo.build_curriculum(CurriculumConfig(name="uniform"), [f"p{i}" for i in range(ids)], 0),
                    meter=ComputeMeter(n_params=1), forecaster=Forecaster(ForecastConfig()))


def _drive(schedule, steps: int) -> dict[int, int]:
    """The runner's order of work per step, without a model: issue at the trainer's version, train batch
    ``step`` (version + 1). Returns the version at which each batch was issued."""
    state, issued_at = _run_state(), {}
    version = 0
    while state.step < steps:
        for r in state.issue(schedule, version, steps, 2, 0):
            issued_at[r.index] = version
        assert state.step in state.pending  # the trainer never waits for a batch that was not requested
        state.trained()
        version += 1
    return issued_at


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_pipeline_rl_issues_each_batch_once_the_trainer_is_at_most_k_ahead(k):
    """§3.1: batch b starts once version b − k exists, no sooner (the trainer waits if k ahead): trained at
    version b, its tokens are at most k versions old."""
    issued = _drive(SCHEDULES.get("pipeline_rl")(k), 30)
    assert sorted(issued) == list(range(30))
    assert all(issued[b] == max(0, b - k) for b in issued)


@pytest.mark.parametrize("k,steps", [(2, 8), (3, 9), (4, 8), (3, 7), (4, 5)])
def test_ppo_off_policy_issues_whole_groups_at_their_start_version(k, steps):
    """§3.1: the k × B̂ batch is generated with one version, then k updates: every batch of group g is issued at
    version g·k, the group whole (one request list), even when ``steps`` ends inside it; so the requests (and
    hence the samples) of the batches a run trains do not depend on its step budget."""
    schedule = SCHEDULES.get("ppo_off_policy")(k)
    issued = _drive(schedule, steps)
    groups = -(-steps // k)
    assert sorted(issued) == list(range(groups * k))
    assert all(issued[b] == (b // k) * k for b in issued)
    longer = _run_state()
    short = _run_state()
    for version in range(0, steps, k):  # the same requests whatever the budget
        assert longer.issue(schedule, version, steps + 2 * k, 2, 0)[: k] == short.issue(schedule, version, steps, 2, 0)


def test_generate_on_schedule_loads_the_group_weights_and_takes_new_ones_only_in_flight():
    """``generate_on_schedule``: the generator loads the channel's weights when they are newer than its own;
    PipelineRL hands the engine a weight source (in-flight loads between decode steps), PPO-off-policy none."""
    channel = WeightChannel({"w": torch.zeros(2)}, version=4)
    seen = []

    class Worker:
        version = 1

        def load(self, version, weights):
            seen.append(("load", version))
            self.version = version

        def generate(self, group, weight_source=None):
            seen.append(("generate", [r.index for r in group], weight_source is not None))
            return []

    for name, first in (("ppo_off_policy", 4), ("pipeline_rl", 6)):
        seen.clear()
        schedule = SCHEDULES.get(name)(2)
        generate_on_schedule(Worker(), channel, schedule, [Request(first, [], 0)])
        assert seen == [("load", 4), ("generate", [first], name == "pipeline_rl")]


# ---------------------------------------------------------------------------------------------- resume mid-group

MICRO = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=96", "batch.prompts=4",
         "batch.generations=4", "task.n_train=64", "task.n_val=8", "task.params.max_operands=5",
         "eval.n_samples=1", "eval.every=100", "warmup.steps=300", "algo.length.params.think_lo=6",
         "algo.length.params.think_hi=10", "algo.length.params.answer_budget=4",
         "algo.length.params.max_new_tokens=36", "tensorboard=false", "threads=1", "backend=inline",
         "schedule.name=ppo_off_policy", "schedule.k=3", "algo.truncated=train"]


def _trained(run: Path) -> list[tuple]:
    from scalerl.runlog import read_metrics

    keys = ("step", "train/reward_mean", "loss", "grad_norm", "train/staleness_max", "train/staleness_mean")
    return [tuple(r[k] for k in keys) for r in read_metrics(run) if "loss" in r]


def test_resume_inside_a_ppo_group_trains_what_an_uninterrupted_run_does(tmp_path):
    """PPO-off-policy-3 over 6 steps (groups {0,1,2}, {3,4,5}). (a) A crash after the checkpoint at step 4 (inside
    the second group) resumes from it; (b) a run whose ``steps`` budget (4) ends inside the group, resumed with
    ``steps=6``. Both train what the uninterrupted run trains: the same prompts, rewards, losses and staleness
    (b mod k: the group's batches all from its start version). Before the fix (b) generated batch 3 alone and
    batches 4-5 after the resume with the trainer's newer weights: staleness 0, 1 instead of 1, 2, and other
    samples, and the 4-step run's own step 4 already differed from the 6-step run's."""
    from scalerl.pipeline.runner import train

    ref = tmp_path / "ref"
    train(load_config("scalerl", None, [*MICRO, "steps=6", "checkpoint_every=4"]), ref, show_progress=False)
    expected = _trained(ref)
    assert [r[4] for r in expected] == [0, 1, 2, 0, 1, 2]
    assert any(r[2] != 0 for r in expected)  # some learning signal: the comparison is not vacuous

    crashed = tmp_path / "crashed"  # the run as it was when killed after its step-4 checkpoint
    shutil.copytree(ref, crashed)
    (crashed / "checkpoints" / "step_0000006.pt").unlink()
    (crashed / "checkpoints" / "latest").write_text("step_0000004.pt")
    train(load_config("scalerl", None, [*MICRO, "steps=6", "checkpoint_every=4"]), crashed, resume=True,
          show_progress=False)

    budget = tmp_path / "budget"
    train(load_config("scalerl", None, [*MICRO, "steps=4", "checkpoint_every=4"]), budget, show_progress=False)
    assert _trained(budget) == expected[:4]  # the budget does not change what step 4 trains
    train(load_config("scalerl", None, [*MICRO, "steps=6", "checkpoint_every=4"]), budget, resume=True,
          show_progress=False)

    consumed = (ref / "consumed.jsonl").read_text()
    for run in (crashed, budget):
        assert _trained(run) == expected
        assert (run / "consumed.jsonl").read_text() == consumed


# ---------------------------------------------------------------------------------------------- length control


@pytest.mark.parametrize("l_max,l_cache", [(14, 4), (14336, 2048), (96, 24)])
def test_length_penalty_at_its_boundaries(l_max, l_cache):
    """Eq. 9 on hand-worked lengths: 0 through L_max − L_cache, −1/L_cache one token later, −0.5 half-way, −1 at
    L_max and beyond; added to correct traces only."""
    lp = LengthPenalty(l_max=l_max, l_cache=l_cache, max_new_tokens=l_max + 10)
    lengths = [0, l_max - l_cache - 1, l_max - l_cache, l_max - l_cache + 1, l_max - l_cache // 2, l_max - 1, l_max,
               l_max + 1]
    hand = [0, 0, 0, -1 / l_cache, -0.5, -(l_cache - 1) / l_cache, -1, -1]
    assert [ref_length_penalty(n, l_max, l_cache) for n in lengths] == pytest.approx(hand)
    got = lp.penalty(torch.tensor(lengths)).tolist()
    assert got == pytest.approx(hand, abs=1e-12)
    n = len(lengths)
    correct = torch.tensor([True, False] * (n // 2))
    shaped = lp.shape_rewards(torch.where(correct, 1.0, -1.0), torch.tensor(lengths), correct)
    want = [1 + h if c else -1.0 for h, c in zip(hand, correct.tolist())]
    assert shaped.tolist() == pytest.approx(want, abs=1e-6)


def test_truncated_samples_trained_on_get_the_incorrect_reward():
    """``algo.truncated: train``: "trains on them with the incorrect reward" (config.py), "a rambling answer is a
    wrong one (-1)" (configs/smollm2.yaml). Sample (2, 3) of the hand batch is truncated, but the grader passed
    it: it was trained as correct (+1), its advantage (norm none: r − mean) +0.5, not −1. The zero-variance filter
    reads it as the wrong answer its reward says it is."""
    b, _, _ = _hand_batch()
    assert bool(b.truncated[11]) and bool(b.correct[11])
    p = prepare(b, 0, StageConfig(2, False, "none", 0.0, truncated="train"))
    assert p.keep.all()
    assert float(p.advantages[11]) == pytest.approx(-1 - (-1 + 1 + 1 - 1) / 4)
