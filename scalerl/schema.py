"""The registries' parameter types (§3.2 losses, curricula and length control, §4 the recipe), torch-free.

Every registry entry with hyper-parameters has one ``Params`` class: its fields, defaults and bounds are the
entry's hyper-parameters, and its ``names`` are the registry names it serves (``PARAMS[kind][name]``, filled as
the classes are defined, so the registries' names derive from these types). A config section ``{name, params}``
is validated once, at load (``scalerl/config.py``): ``params`` becomes the typed object, which the
implementation receives as it is (:class:`Configured`). Nothing is built to be checked and no torch is imported.

A new entry is one ``Params`` subclass (with ``kind`` from its base and its ``names``) plus one implementation
registered for it (``Registry.implement``); neither has to live in this file.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
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


# registry kind -> entry name -> its params type; filled by ``Params`` subclasses that declare ``names``
PARAMS: dict[str, dict[str, type["Params"]]] = {}


class Params(BaseModel):
    """An entry's hyper-parameters: unknown keys are refused. A subclass that declares ``names`` serves those
    registry names of its ``kind`` (inherited from a base such as ``LossParams``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: ClassVar[str] = ""
    names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for name in cls.__dict__.get("names", ()):
            entries = PARAMS.setdefault(cls.kind, {})
            if name in entries:
                twice = f"{entries[name].__name__}, {cls.__name__}"
                raise ValueError(f"{cls.kind} {name!r}: parameters declared twice ({twice})")
            entries[name] = cls


class LossParams(Params):
    kind = "loss"


class CurriculumParams(Params):
    kind = "curriculum"


class LengthParams(Params):
    kind = "length control"


# ---------------------------------------------------------------------------------------------- losses (§3.2)


class CISPOParams(LossParams):
    names = ("cispo",)
    eps_max: Positive = 4.0  # ε_max ∈ {4, 5, 8} behaved alike (Fig. 19b)


class ReinforceParams(LossParams):
    names = ("reinforce",)


class ClipParams(LossParams):
    names = ("ppo", "grpo")
    eps_low: Positive = 0.2  # PPO / DeepSeek GRPO (A.16)
    eps_high: Positive = 0.2


class DAPOParams(ClipParams):
    names = ("dapo",)
    eps_high: Positive = 0.28  # Yu et al.; the paper's DAPO recipe uses 0.26 (A.17.1), set by the preset


class GSPOParams(ClipParams):
    names = ("gspo",)
    eps_low: Positive = 3e-3  # ScaleRL's best GSPO setting (Fig. 20)
    eps_high: Positive = 5e-3


# ---------------------------------------------------------------------------------------------- curricula (§3.2, Fig. 6b)


class UniformParams(CurriculumParams):
    names = ("uniform",)


class NPRParams(CurriculumParams):
    names = ("npr",)
    threshold: Fraction = 0.9  # pass_rate(x) < 0.9 in the ScaleRL objective (§4)
    min_samples: PositiveInt = 1


# ---------------------------------------------------------------------------------------------- length (§2, App. A.10)


class NoLengthParams(LengthParams):
    names = ("none",)
    max_new_tokens: PositiveInt = 96  # hard cap on completion tokens (sampled + forced)


class InterruptionParams(NoLengthParams):
    """Sized for the built-in task; the paper: 10k–12k thinking, 2k answer, 14k generation (A.3)."""

    names = ("interruption",)
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
    ``max_new_tokens``; otherwise the hard cap truncates the answer the interruption exists to allow (§2, App. A.10)."""
    need = params.think_hi + phrase_tokens + params.answer_budget
    if params.max_new_tokens < need:
        raise ValueError(
            f"max_new_tokens: must hold think_hi + phrase + answer_budget = {params.think_hi} + {phrase_tokens} + "
            f"{params.answer_budget} = {need} tokens, got {params.max_new_tokens}; raise max_new_tokens or lower think_hi"
        )


class LengthPenaltyParams(NoLengthParams):
    """DAPO's over-long penalty (Eq. 9); the paper: L_max 14k, L_cache 2k."""

    names = ("length_penalty",)
    l_max: PositiveInt = 96
    l_cache: Positive = 24

    @model_validator(mode="after")
    def _consistent(self) -> "LengthPenaltyParams":
        if self.l_cache > self.l_max:
            raise ValueError(f"l_cache: must be <= l_max ({self.l_max}), got {self.l_cache}")
        # Eq. 9's L_max is the generation budget (14k, A.3): past the hard cap no completion is ever penalised
        # in full, and with l_max - l_cache >= max_new_tokens not at all
        if self.l_max > self.max_new_tokens:
            raise ValueError(f"l_max: must be <= max_new_tokens ({self.max_new_tokens}), the hard cap on a "
                             f"completion (Eq. 9: L_max is the generation budget), got {self.l_max}")
        return self


# ---------------------------------------------------------------------------------------------- the registries

# registries whose entries take no params: just the names (tests/test_layering.py checks them against the
# registries in scalerl.algo / engines / pipeline)
NAMES: dict[str, tuple[str, ...]] = {
    "aggregation": ("prompt", "sample", "token"),
    "advantage normalisation": ("batch", "prompt", "none"),
    "schedule": ("pipeline_rl", "ppo_off_policy"),
    "engine": ("native", "vllm"),
}


def _message(exc: ValidationError, kind: str, name: str, where: str) -> str:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        accepted = ", ".join(PARAMS[kind][name].model_fields) or "none"
        msg = f"unknown parameter for {kind} {name!r}; accepted: {accepted}"
    elif ": " in msg and msg.split(": ", 1)[0].isidentifier():  # "<field>: <problem>" from a check across fields
        head, msg = msg.split(": ", 1)
        loc = loc if loc and loc[-1] == head else loc + [head]
    elif "got" not in msg and not isinstance(err.get("input"), (dict, list)):
        msg = f"{msg}, got {err.get('input')!r}"
    return f"{'.'.join([where, 'params', *loc])}: {msg}"


def typed_params(kind: str, name: str, params: Any, where: str) -> Params:
    """The typed params of entry ``name`` of registry ``kind``: ``params`` as it is when it already is one (it was
    validated where it was made), else the mapping validated, defaults filled in. A mistake is a one-line
    ``UserError`` naming the field, e.g. ``algo.loss.params.eps_max: must be > 0, got -1``."""
    entries = PARAMS.get(kind, {})
    if name not in entries:
        raise UserError(f"{where}.name: {unknown_name(kind, name, entries)}")
    model = entries[name]
    if type(params) is model:
        return params
    if isinstance(params, Params):
        params = params.model_dump(exclude_unset=True)
    try:
        return model.model_validate(params if params is not None else {})
    except ValidationError as exc:
        raise UserError(_message(exc, kind, name, where)) from None


def check_name(kind: str, name: str, where: str) -> None:
    if name not in NAMES[kind]:
        raise UserError(f"{where}: {unknown_name(kind, name, NAMES[kind])}")


def check_algo(algo: Any) -> None:
    """The names in an ``AlgoConfig`` whose registries take no params known; builds nothing. (The loss, the
    curriculum and the length control were typed, names and params, when the config loaded: ``config.Entry``.)"""
    check_name("aggregation", algo.aggregation, "algo.aggregation")
    check_name("advantage normalisation", algo.advantages.norm, "algo.advantages.norm")


def params_from(model: type[Params], values: dict[str, Any]) -> Params:
    """``values`` validated as ``model`` (a direct construction in code, not a config); a mistake raises
    ``ValueError("<field>: <problem>")``."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        field = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{field}: {msg}" if field else msg) from None


def own_params(impl: Any, params: Params | None, values: dict[str, Any]) -> Params:
    """The params an implementation is made with: ``params`` (typed, already validated) as they are, or the
    keyword ``values`` validated against its ``params_model``."""
    if params is None:
        return params_from(impl.params_model, values)
    if values or not isinstance(params, impl.params_model):
        raise TypeError(f"{type(impl).__name__} takes a {impl.params_model.__name__} or its fields as keywords")
    return params


class Configured:
    """An implementation configured by its typed params (``params_model``): ``Impl(params)`` with the object a
    config was validated into, used as it is; or ``Impl(field=value, ...)`` in code, validated here. Either
    way each value is validated once. Hyper-parameters read as attributes (``loss.eps_max``); two
    implementations are equal when their types and params are."""

    params_model: ClassVar[type[Params]]
    params: Params

    def __init__(self, params: Params | None = None, **values: Any) -> None:
        object.__setattr__(self, "params", own_params(self, params, values))

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("params")
        if params is not None and name in type(params).model_fields:
            return getattr(params, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: its hyper-parameters are its params")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.params == self.params  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.params))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.params.model_dump().items())
        return f"{type(self).__name__}({fields})"
