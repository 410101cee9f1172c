"""Name -> implementation registries. Losses, aggregations, advantage normalisations, curricula and length
controls are looked up here by the name the config gives, so the trainer never branches on an algorithm's
name and an ablation is a config change.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterable, Iterator, TypeVar

from scalerl.errors import UserError

T = TypeVar("T")


def unknown_name(kind: str, name: object, choices: Iterable[str]) -> str:
    """The one wording for a name a registry does not hold (the torch-free config check words it alike)."""
    return f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(choices))}"


class Registry(Generic[T]):
    """A named collection. ``@REG.register("name")`` adds an entry; ``REG.get(name)`` finds it or raises a
    one-line UserError that lists the names there are."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def implement(self, obj: T) -> T:
        """Register ``obj`` (a class with a ``params_model``, ``scalerl/schema.py``) under every name its params
        type serves: the names derive from the types, and no name is written twice."""
        for name in obj.params_model.names:  # type: ignore[attr-defined]
            self.register(name)(obj)
        return obj

    def get(self, name: str, field: str | None = None) -> T:
        try:
            return self._items[name]
        except KeyError:
            where = f"{field}: " if field else ""
            raise UserError(f"{where}{unknown_name(self.kind, name, self._items)}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
