"""Tasks by name (``task.name`` in the config). A factory is called as
``factory(seed=..., n_train=..., n_val=..., **params)`` and returns an object satisfying
``scalerl.tasks.base.Task``."""

from __future__ import annotations

from typing import Callable

from scalerl.registry import Registry
from scalerl.tasks.base import Task

TASKS: Registry[Callable[..., Task]] = Registry("task")
