"""The registries' parameter schemas (§3.2 losses, §3.4 aggregation, §3.5 advantages, §3.7 curricula, §3.8 length
control, §3.1 schedules; design.md ``config.py``), torch-free.

Each registry is a pydantic discriminated union on ``name``: every entry's ``params`` is a typed model whose
fields, defaults and bounds are the entry's hyper-parameters. Validating a config is validating against these
models, so nothing is built to be checked and no torch is imported. The implementations in ``scalerl.algo`` take
their defaults from here and check direct constructions with the same models (:func:`check_fields`).

The config tree keeps ``params`` as the mapping the user wrote (so a resolved config, ``presets --show`` and
``config_diff`` show exactly what was set); :func:`typed` gives the validated, defaulted entry.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import fields as dataclass_fields, is_dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic import model_validator

from scalerl.errors import UserError
from scalerl.registry import unknown_name

THINK_END = "</think>"
# arXiv §4 wording; ICLR §4 has "formulate an answer now", A.10 drops "now".
PAPER_PHRASE = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"


# ---------------------------------------------------------------------------------------------- value checks
# Each raises ``ValueError("<problem>, got <value>")``; bools and strings are refused where a number is meant
# (YAML ``yes`` or ``"0.2"`` are mistakes).


def number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value!r}")
    return float(value)


def integer(value: Any) -> int:
    """A float with a fractional part is refused; ``4.0`` is 4."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or float(value) != int(value):
        raise ValueError(f"must be an integer, got {value!r}")
    return int(value)


def positive(value: Any) -> float:
    if not number(value) > 0:
        raise ValueError(f"must be > 0, got {value!r}")
    return float(value)


def positive_int(value: Any) -> int:
    if integer(value) < 1:
        raise ValueError(f"must be >= 1, got {value!r}")
    return int(value)


def fraction(value: Any) -> float:
    """A number in (0, 1]."""
    if not 0 < number(value) <= 1:
        raise ValueError(f"must be in (0, 1], got {value!r}")
    return float(value)


Positive = Annotated[float, BeforeValidator(positive)]
PositiveInt = Annotated[int, BeforeValidator(positive_int)]
Fraction = Annotated[float, BeforeValidator(fraction)]


class Params(BaseModel):
    """An entry's hyper-parameters: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ---------------------------------------------------------------------------------------------- losses (§3.2)


class CISPOParams(Params):
    eps_max: Positive = 4.0  # ε_max ∈ {4, 5, 8} behaved alike (Fig. 19b)


class ClipParams(Params):
    eps_low: Positive = 0.2  # PPO / DeepSeek GRPO (A.16)
    eps_high: Positive = 0.2


class DAPOParams(ClipParams):
    eps_high: Positive = 0.28  # Yu et al.; the paper's DAPO recipe uses 0.26 (A.17.1), set by the preset


class GSPOParams(ClipParams):
    eps_low: Positive = 3e-3  # ScaleRL's best GSPO setting (Fig. 20)
    eps_high: Positive = 5e-3


class NoParams(Params):
    pass


# ---------------------------------------------------------------------------------------------- curricula (§3.7)


class NPRParams(Params):
    threshold: Fraction = 0.9  # pass_rate(x) < 0.9 in the ScaleRL objective (§3.10)
    min_samples: PositiveInt = 1


# ---------------------------------------------------------------------------------------------- length (§3.8)


class NoLengthParams(Params):
    max_new_tokens: PositiveInt = 96  # hard cap on completion tokens (sampled + forced)


class InterruptionParams(NoLengthParams):
    """Sized for the built-in task; the paper: 10k–12k thinking, 2k answer, 14k generation (A.3)."""

    think_lo: PositiveInt = 24
    think_hi: PositiveInt = 48
    answer_budget: PositiveInt = 8
    phrase: str = PAPER_PHRASE

    @model_validator(mode="after")
    def _consistent(self) -> "InterruptionParams":
        if self.think_hi < self.think_lo:
            raise ValueError(f"think_hi: must be >= think_lo ({self.think_lo}), got {self.think_hi}")
        if not self.phrase.rstrip().endswith(THINK_END):
            raise ValueError(f"phrase: must end with {THINK_END!r}, got {self.phrase!r}")
        fits(self, 1)  # the phrase has at least one token; its exact length needs the tokenizer
        return self


def fits(params: Any, phrase_tokens: int) -> None:
    """The longest interrupted completion, ``think_hi + phrase + answer_budget`` tokens, must fit in
    ``max_new_tokens``; otherwise the hard cap truncates the answer the interruption exists to allow (§3.8)."""
    need = params.think_hi + phrase_tokens + params.answer_budget
    if params.max_new_tokens < need:
        raise ValueError(
            f"max_new_tokens: must hold think_hi + phrase + answer_budget = {params.think_hi} + {phrase_tokens} + "
            f"{params.answer_budget} = {need} tokens, got {params.max_new_tokens}; raise max_new_tokens or lower think_hi"
        )


class LengthPenaltyParams(NoLengthParams):
    """DAPO's over-long penalty (Eq. 9); the paper: L_max 14k, L_cache 2k."""

    l_max: PositiveInt = 96
    l_cache: Positive = 24

    @model_validator(mode="after")
    def _consistent(self) -> "LengthPenaltyParams":
        if self.l_cache > self.l_max:
            raise ValueError(f"l_cache: must be <= l_max ({self.l_max}), got {self.l_cache}")
        return self


# ---------------------------------------------------------------------------------------------- the registries

# registry kind (as the registries word it) -> entry name -> params model; tests/test_layering.py checks that
# each registry in scalerl.algo / engines / pipeline holds exactly these names
REGISTRIES: dict[str, dict[str, type[Params]]] = {
    "loss": {
        "cispo": CISPOParams, "reinforce": NoParams, "ppo": ClipParams, "grpo": ClipParams, "dapo": DAPOParams,
        "gspo": GSPOParams,
    },
    "curriculum": {"npr": NPRParams, "uniform": NoParams},
    "length control": {"interruption": InterruptionParams, "length_penalty": LengthPenaltyParams, "none": NoLengthParams},
}
# registries whose entries take no params: just the names
NAMES: dict[str, tuple[str, ...]] = {
    "aggregation": ("prompt", "sample", "token"),
    "advantage normalisation": ("batch", "prompt", "none"),
    "schedule": ("pipeline_rl", "ppo_off_policy"),
    "engine": ("native", "vllm"),
}


def _entry_union(kind: str) -> TypeAdapter:
    """``{name, params}`` as a pydantic union discriminated by ``name``."""
    variants = tuple(
        create_model(
            f"{kind.title().replace(' ', '')}_{name}",
            __config__=ConfigDict(extra="forbid", frozen=True),
            name=(Literal[name], ...),
            params=(model, Field(default_factory=model)),
        )
        for name, model in REGISTRIES[kind].items()
    )
    return TypeAdapter(Annotated[Union[variants], Field(discriminator="name")])  # type: ignore[valid-type]


_UNIONS = {kind: _entry_union(kind) for kind in REGISTRIES}


def _message(exc: ValidationError, kind: str, name: str, where: str) -> str:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"][1:]]  # [0] is the union's tag
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "union_tag_invalid":
        return f"{where}.name: {unknown_name(kind, name, REGISTRIES[kind])}"
    if err["type"] == "extra_forbidden":
        accepted = ", ".join(REGISTRIES[kind][name].model_fields) or "none"
        msg = f"unknown parameter for {kind} {name!r}; accepted: {accepted}"
    elif ": " in msg and msg.split(": ", 1)[0].isidentifier():  # "<field>: <problem>" from a check across fields
        head, msg = msg.split(": ", 1)
        loc = loc if loc and loc[-1] == head else loc + [head]
    elif "got" not in msg and not isinstance(err.get("input"), (dict, list)):
        msg = f"{msg}, got {err.get('input')!r}"
    return f"{'.'.join([where, *loc])}: {msg}"


def typed(kind: str, section: Any, where: str) -> Any:
    """``section`` (an object or mapping with ``name`` and ``params``) validated against ``kind``'s schema:
    an object with ``name`` and typed ``params``, defaults filled in. A mistake is a one-line ``UserError``
    naming the field, e.g. ``algo.loss.params.eps_max: must be > 0, got -1``."""
    data = section if isinstance(section, dict) else {"name": section.name, "params": section.params}
    try:
        return _UNIONS[kind].validate_python(data)
    except ValidationError as exc:
        raise UserError(_message(exc, kind, str(data.get("name")), where)) from None


def check_name(kind: str, name: str, where: str) -> None:
    if name not in NAMES[kind]:
        raise UserError(f"{where}: {unknown_name(kind, name, NAMES[kind])}")


def check_algo(algo: Any) -> None:
    """Every name in an ``AlgoConfig`` known and every params mapping valid for its entry; builds nothing."""
    typed("loss", algo.loss, "algo.loss")
    check_name("aggregation", algo.aggregation, "algo.aggregation")
    check_name("advantage normalisation", algo.advantages.norm, "algo.advantages.norm")
    typed("curriculum", algo.curriculum, "algo.curriculum")
    typed("length control", algo.length, "algo.length")


def check_fields(obj: Any, model: type[Params], values: dict[str, Any] | None = None) -> Params:
    """Validate an implementation's hyper-parameters (a frozen dataclass's fields, or ``values``) with its
    schema; store the normalised values on a dataclass. Raises ``ValueError("<field>: <problem>")``."""
    if values is None:
        values = {f.name: getattr(obj, f.name) for f in dataclass_fields(obj) if f.name in model.model_fields}
    try:
        params = model.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        field = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{field}: {msg}" if field else msg) from None
    if is_dataclass(obj):
        for key in values:
            object.__setattr__(obj, key, getattr(params, key))
    return params


def default(model: type[Params], field: str) -> Any:
    """A params model's default for ``field``: the one place an implementation's default is written."""
    return model.model_fields[field].default

