"""Training compute, the x-axis of the compute-reward curve (§1.1: the paper uses GPU-hours).

Compute is what was spent on training, metered the same way for every schedule (§3.1), so that PipelineRL and
PPO-off-policy are compared on equal terms:

* ``compute/device_hours``: every process's busy time, summed: each generator's time inside its engine for the
  batches it produced (``RolloutBatch.gen_seconds``; with PPO-off-policy a group of k batches generated together
  shares its time), plus the trainer's time stepping and publishing weights on each of its devices. Generation
  that overlaps the trainer's evaluation or checkpoints counts (it produced training data); evaluation and
  checkpoints themselves do not, for any schedule. Idle time counts for no schedule. ``devices`` in the config
  rescales the sum to the devices the run really occupies.
* ``compute/flops``: 2·P FLOPs per token the generators processed (each group's prompt prefilled once, every
  completion token) for *every* generated group, including the groups the zero-variance filter later drops, and
  6·P per token the trainer trained on (forward + backward, kept sequences only). P = parameter count; the
  attention term is left out.
* ``compute/tokens``: completion tokens generated (sampled and forced).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class ComputeMeter:
    n_params: int
    trainer_devices: int = 1  # devices the trainer's busy time is charged on (its data-parallel ranks)
    scale: float = 1.0  # devices declared in the config / devices metered, when the config declares them
    gen_seconds: float = 0.0
    train_seconds: float = 0.0
    gen_tokens: int = 0  # prompt + completion tokens processed by the generators
    trained_tokens: int = 0  # tokens of the sequences the trainer kept
    tokens: int = 0  # completion tokens generated

    def add_generation(self, seconds: float, prompt_tokens: int, completion_tokens: int) -> None:
        """One generated batch: its generator's busy seconds and every token it processed."""
        self.gen_seconds += max(0.0, seconds)
        self.gen_tokens += prompt_tokens + completion_tokens
        self.tokens += completion_tokens

    def add_training(self, seconds: float, trained_tokens: int) -> None:
        """One optimizer step: the trainer's busy seconds (step + publish) and the tokens it trained on."""
        self.train_seconds += max(0.0, seconds)
        self.trained_tokens += trained_tokens

    @property
    def device_hours(self) -> float:
        return (self.gen_seconds + self.train_seconds * self.trainer_devices) * self.scale / 3600.0

    @property
    def flops(self) -> float:
        return 2.0 * self.n_params * self.gen_tokens + 6.0 * self.n_params * self.trained_tokens

    def metrics(self) -> dict[str, float]:
        return {
            "compute/device_hours": self.device_hours,
            "compute/flops": self.flops,
            "compute/tokens": float(self.tokens),
            "compute/gen_seconds": self.gen_seconds,
            "compute/train_seconds": self.train_seconds,
        }

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, type(getattr(self, key))(value))
