"""Training compute, the x-axis of the compute-reward curve (App. A.3: the paper uses GPU-hours).

The paper's GPU-hours are every device the run holds × wall clock: a device that waits still counts, which is
why PipelineRL, which "reduces idle time" (§3.1, App. A.11), is more efficient than PPO-off-policy, whose
generation and training alternate. The meter counts the same way for every schedule and backend:

* ``compute/device_hours``: ``devices`` × the run's training wall clock. ``devices`` is every device the run
  holds (the trainer's ranks and the backend's generators; ``devices`` in the config overrides it). The wall
  clock runs from the first training step to the last; evaluation and checkpoint pauses are left out, for every
  schedule and backend alike (the curves are training compute, and how often one evaluates is not part of a
  recipe). A resumed run continues the count: the device-seconds metered before the checkpoint stay as they were
  (at the devices held then), and only the wall clock after it is charged at the devices this run holds. No training work falls in that time: while the loop waits for an evaluation the generators are held
  (``RunLoop.paused``: they start no batch, and a batch under way that the trainer needs next is waited for,
  metered, before the pause; on the Ray backend, whose driver cannot see whether an actor is generating, a group
  under way finishes in the pause instead: ``RayBackend.hold``), and a checkpoint's wait for the trainer's next batch is metered (the rest of it,
  and the writing, is a pause). A run that has done all its steps stops the meter after its last step: it trains
  on nothing generated after it, so its last evaluation's and checkpoint's waits are not compute (a run stopped
  by a budget or stop rule meters them: its checkpoint keeps the batch it waited for, which the resumed run trains
  on). Start-up (model build, warm-up, generator start) is not counted either.
* ``compute/flops``: 2·P FLOPs per token the generators processed (each group's prompt prefilled once, every
  completion token) for *every* generated group, including the groups the zero-variance filter later drops, and
  6·P per token the trainer trained on (forward + backward, kept sequences only). P = parameter count; the
  attention term is left out. The axis kept beside device-hours: it counts work, not time.
* ``compute/tokens``: completion tokens generated (sampled and forced).
* ``compute/gen_seconds``, ``compute/train_seconds``: each side's busy seconds (diagnostics: how much of the
  wall clock each side worked); ``compute/wall_s``: the metered wall clock.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from scalerl.timing import Stopwatch

STATE_FIELDS = ("n_params", "devices", "wall_seconds", "gen_seconds", "train_seconds", "gen_tokens",
                "trained_tokens", "tokens")


@dataclass
class ComputeMeter:
    n_params: int
    devices: int = 1  # every device the run holds (the trainer's ranks + the generators), or the config's count
    wall_seconds: float = 0.0  # training wall clock metered so far (pauses left out)
    gen_seconds: float = 0.0
    train_seconds: float = 0.0
    gen_tokens: int = 0  # prompt + completion tokens processed by the generators
    trained_tokens: int = 0  # tokens of the sequences the trainer kept
    tokens: int = 0  # completion tokens generated
    # device-seconds metered before this run's devices took over (a resumed run's checkpoint), and the wall
    # clock they cover: that part of the wall clock is not charged again at this run's device count
    past_device_seconds: float = 0.0
    past_wall_seconds: float = 0.0
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)
    _interval: Stopwatch = field(init=False, repr=False, compare=False)  # the running interval of the clock

    def __post_init__(self) -> None:
        self._interval = Stopwatch(self.clock)

    # ------------------------------------------------------------------ the wall clock

    def start(self) -> None:
        """The training clock runs from now (idempotent)."""
        self._interval.start()

    def stop(self) -> None:
        """The training clock stops; the seconds since ``start`` are metered."""
        self.wall_seconds += self._interval.stop()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """An evaluation or checkpoint pause: not metered, for any schedule or backend."""
        running = self._interval.running
        self.stop()
        try:
            yield
        finally:
            if running:
                self.start()

    def add_wall(self, seconds: float) -> None:
        """Wall-clock seconds measured elsewhere (a framework's step timer) added to the training clock."""
        self.wall_seconds += max(0.0, seconds)

    @property
    def wall(self) -> float:
        """Training wall clock so far, the running interval included."""
        return self.wall_seconds + self._interval.seconds

    # ------------------------------------------------------------------ work

    def add_generation(self, seconds: float, prompt_tokens: int, completion_tokens: int) -> None:
        """One generated batch: its generator's busy seconds and every token it processed."""
        self.gen_seconds += max(0.0, seconds)
        self.gen_tokens += prompt_tokens + completion_tokens
        self.tokens += completion_tokens

    def add_training(self, seconds: float, trained_tokens: int) -> None:
        """One optimizer step: the trainer's busy seconds (step + publish) and the tokens it trained on."""
        self.train_seconds += max(0.0, seconds)
        self.trained_tokens += trained_tokens

    def _device_seconds(self, wall: float) -> float:
        """Device-seconds for a training wall clock of ``wall``: the past run's as metered, the rest × ``devices``."""
        return self.past_device_seconds + self.devices * max(0.0, wall - self.past_wall_seconds)

    @property
    def device_seconds(self) -> float:
        return self._device_seconds(self.wall)

    @property
    def device_hours(self) -> float:
        """Every device the run holds × the training wall clock (App. A.3)."""
        return self.device_seconds / 3600.0

    @property
    def flops(self) -> float:
        return 2.0 * self.n_params * self.gen_tokens + 6.0 * self.n_params * self.trained_tokens

    def metrics(self) -> dict[str, float]:
        wall = self.wall  # one reading of a running clock for both keys
        return {
            "compute/device_hours": self._device_seconds(wall) / 3600.0,
            "compute/flops": self.flops,
            "compute/tokens": float(self.tokens),
            "compute/wall_s": wall,
            "compute/gen_seconds": self.gen_seconds,
            "compute/train_seconds": self.train_seconds,
        }

    def state_dict(self) -> dict[str, float]:
        """The metered totals (a running interval is metered up to now)."""
        wall = self.wall
        return {**{k: getattr(self, k) for k in STATE_FIELDS}, "wall_seconds": wall,
                "device_seconds": self._device_seconds(wall)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore the totals; ``devices`` stays this run's (a resumed run may run on other devices): the
        device-seconds metered so far are kept as they were, and only what follows is charged at ``devices``."""
        for key in STATE_FIELDS:
            if key in state and key != "devices":
                setattr(self, key, type(getattr(self, key))(state[key]))
        wall = float(state.get("wall_seconds", 0.0))
        held = int(state.get("devices", self.devices))  # a checkpoint from before device_seconds was saved
        self.past_device_seconds = float(state.get("device_seconds", held * wall))
        self.past_wall_seconds = wall
