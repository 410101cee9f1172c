"""What a generation engine does (docs/architecture.md, engines/).

An engine samples ``n`` completions per prompt at temperature 1, records for every completion token the
generator's log-probability (from the FP32 head when on, §3.2, Fig. 5b) and the policy version it was sampled under,
applies interruptions (§2, App. A.10), and can take new weights *between decode steps* while sequences are
mid-generation, keeping its KV cache (in-flight weight updates, PipelineRL §3.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl

# Returns (version, state_dict) when weights newer than ``current_version`` are available, else None.
# Polled by the engine between decode steps when in-flight updates are on.
WeightSource = Callable[[int], "tuple[int, Mapping[str, torch.Tensor]] | None"]


@dataclass
class Sample:
    """One completion of one prompt."""

    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)  # completion tokens: sampled and forced
    logprobs: list[float] = field(default_factory=list)  # generator log-prob per token; 0.0 for forced tokens
    versions: list[int] = field(default_factory=list)  # policy version per token
    forced: list[bool] = field(default_factory=list)  # True for interruption-phrase tokens (zero loss weight)
    finished: bool = False  # ended with EOS
    truncated: bool = False  # hit the hard token cap without EOS
    interrupted: bool = False  # the thinking budget ran out and the phrase was forced
    think_budget: int | None = None  # the budget drawn for this sequence (None: no interruption)
    text: str = ""  # decoded completion (filled by the engine)


@runtime_checkable
class Engine(Protocol):
    version: int  # policy version of the weights in use now

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        length: LengthControl | None,
        seed: int,
        weight_source: WeightSource | None = None,
    ) -> list[list[Sample]]:
        """``n`` samples for each prompt (outer list: prompts, inner: samples).

        ``length`` is the run's length control (None: no interruptions, up to the model's context). ``seed`` makes the
        sampling reproducible. With ``weight_source``, new weights are loaded between decode steps."""

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Replace the weights now (between batches) and set the policy version."""


class InFlightWeights:
    """Weight handling shared by the engines: ``load_weights`` copies into the model's existing tensors (no
    re-allocation, tied weights kept, KV cache untouched) and ``_poll`` takes newer weights from a
    ``WeightSource`` between decode steps (§3.1). Subclasses set ``self.model`` and ``self.version``."""

    model: torch.nn.Module
    version: int

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        with torch.no_grad():
            self.model.load_state_dict(state_dict, strict=True)
        self.version = int(version)

    def _poll(self, weight_source: WeightSource | None) -> None:
        update = weight_source(self.version) if weight_source is not None else None
        if update is not None:
            self.load_weights(update[1], update[0])
