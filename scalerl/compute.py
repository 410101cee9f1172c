"""Training compute, the x-axis of the compute-reward curve (§1.1: the paper uses GPU-hours).

* ``compute/device_hours``: wall-clock seconds of training x devices in use / 3600. Devices are the
  processes (or GPUs) doing RL work: generator and trainer both count, as the paper counts all 80 GPUs of a
  run (§2, inferred). Evaluation and checkpoint time are not training compute and are excluded.
* ``compute/flops``: 2·P FLOPs per token processed forward by the generator (prompt prefill + completion)
  and 6·P per token in the trainer's forward+backward (P = parameter count; the attention term is left out,
  which is small at these sequence lengths).
* ``compute/tokens``: completion tokens generated (sampled and forced).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class ComputeMeter:
    devices: int
    n_params: int
    seconds: float = 0.0
    flops: float = 0.0
    tokens: int = 0

    def add_time(self, seconds: float) -> None:
        self.seconds += max(0.0, seconds)

    def add_batch(self, prompt_tokens: int, completion_tokens: int, trained_tokens: int) -> None:
        self.tokens += completion_tokens
        self.flops += 2.0 * self.n_params * (prompt_tokens + completion_tokens) + 6.0 * self.n_params * trained_tokens

    @property
    def device_hours(self) -> float:
        return self.seconds * self.devices / 3600.0

    def metrics(self) -> dict[str, float]:
        return {
            "compute/device_hours": self.device_hours,
            "compute/flops": self.flops,
            "compute/tokens": float(self.tokens),
        }

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        for key, value in state.items():
            setattr(self, key, type(getattr(self, key))(value))
