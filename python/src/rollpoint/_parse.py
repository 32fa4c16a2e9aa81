"""Reading wire objects into dataclasses.

The services refuse unknown fields in what they are sent, but a client
should keep working when a newer server adds one to a reply: each object is
read field by field, a wrong type is an error naming the field's path, and
whatever is left over is handed back for the dataclass's ``extra``. Only the
version ``v`` of a top-level document is strict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .errors import ProtocolError, UnsupportedVersion

T = TypeVar("T")

SUPPORTED_VERSIONS = (1,)


class Obj:
    """One JSON object being read; ``path`` names it in errors."""

    def __init__(self, value: object, path: str) -> None:
        if not isinstance(value, dict):
            raise ProtocolError(f"{path}: expected an object, got {_kind(value)}")
        self._d: dict[str, Any] = value
        self._path = path
        self._seen: set[str] = set()

    @property
    def path(self) -> str:
        return self._path

    def _at(self, key: str) -> str:
        return f"{self._path}.{key}"

    def _get(self, key: str, required: bool) -> Any:
        self._seen.add(key)
        if key not in self._d:
            if required:
                raise ProtocolError(f"{self._at(key)}: missing")
            return None
        return self._d[key]

    def version(self, document: str, supported: tuple[int, ...] = SUPPORTED_VERSIONS) -> int:
        """Checks ``v`` against the versions this package reads of ``document``."""
        self._seen.add("v")
        v = self._d.get("v")
        if type(v) is not int or v not in supported:
            raise UnsupportedVersion(document, v, supported)
        return v

    def number_map(self, key: str) -> dict[str, float]:
        """An optional object of numbers (an empty dict when absent)."""
        v = self._get(key, False)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ProtocolError(f"{self._at(key)}: expected an object, got {_kind(v)}")
        out: dict[str, float] = {}
        for k, n in v.items():
            if isinstance(n, bool) or not isinstance(n, int | float):
                raise ProtocolError(f"{self._at(key)}.{k}: expected a number, got {_kind(n)}")
            out[k] = float(n)
        return out

    def string(self, key: str) -> str:
        v = self._get(key, True)
        if not isinstance(v, str):
            raise ProtocolError(f"{self._at(key)}: expected a string, got {_kind(v)}")
        return v

    def opt_string(self, key: str) -> str | None:
        v = self._get(key, False)
        if v is None:
            return None
        if not isinstance(v, str):
            raise ProtocolError(f"{self._at(key)}: expected a string or null, got {_kind(v)}")
        return v

    def integer(self, key: str, default: int | None = None) -> int:
        v = self._get(key, default is None)
        if v is None and default is not None:
            return default
        if type(v) is not int:
            raise ProtocolError(f"{self._at(key)}: expected an integer, got {_kind(v)}")
        return v

    def opt_integer(self, key: str) -> int | None:
        v = self._get(key, False)
        if v is None:
            return None
        if type(v) is not int:
            raise ProtocolError(f"{self._at(key)}: expected an integer or null, got {_kind(v)}")
        return v

    def boolean(self, key: str, default: bool | None = None) -> bool:
        v = self._get(key, default is None)
        if v is None and default is not None:
            return default
        if not isinstance(v, bool):
            raise ProtocolError(f"{self._at(key)}: expected a boolean, got {_kind(v)}")
        return v

    def opt_boolean(self, key: str) -> bool | None:
        v = self._get(key, False)
        if v is None:
            return None
        if not isinstance(v, bool):
            raise ProtocolError(f"{self._at(key)}: expected a boolean or null, got {_kind(v)}")
        return v

    def number(self, key: str) -> float:
        v = self._get(key, True)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ProtocolError(f"{self._at(key)}: expected a number, got {_kind(v)}")
        return float(v)

    def opt_number(self, key: str) -> float | None:
        v = self._get(key, False)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ProtocolError(f"{self._at(key)}: expected a number or null, got {_kind(v)}")
        return float(v)

    def child(self, key: str, read: Callable[[Obj], T]) -> T:
        return read(Obj(self._get(key, True), self._at(key)))

    def opt_child(self, key: str, read: Callable[[Obj], T]) -> T | None:
        v = self._get(key, False)
        return None if v is None else read(Obj(v, self._at(key)))

    def array(self, key: str, read: Callable[[Obj], T], required: bool = True) -> tuple[T, ...]:
        items = self._list(key, required)
        return tuple(read(Obj(v, f"{self._at(key)}[{i}]")) for i, v in enumerate(items))

    def strings(self, key: str, required: bool = True) -> tuple[str, ...]:
        items = self._list(key, required)
        for i, v in enumerate(items):
            if not isinstance(v, str):
                raise ProtocolError(f"{self._at(key)}[{i}]: expected a string, got {_kind(v)}")
        return tuple(items)

    def integers(self, key: str, required: bool = True) -> tuple[int, ...]:
        items = self._list(key, required)
        # `type(...) is int` leaves out booleans.
        if not all(type(v) is int for v in items):
            i = next(i for i, v in enumerate(items) if type(v) is not int)
            raise ProtocolError(f"{self._at(key)}[{i}]: expected an integer, got {_kind(items[i])}")
        return tuple(items)

    def numbers(self, key: str, required: bool = True) -> tuple[float, ...]:
        items = self._list(key, required)
        out = []
        for i, v in enumerate(items):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ProtocolError(f"{self._at(key)}[{i}]: expected a number, got {_kind(v)}")
            out.append(float(v))
        return tuple(out)

    def opt_numbers(self, key: str) -> tuple[float, ...] | None:
        """An array of numbers, or null (or absent)."""
        if self._d.get(key) is None:
            self._seen.add(key)
            return None
        return self.numbers(key)

    def extra(self) -> dict[str, Any]:
        """The fields no reader asked for."""
        return {k: v for k, v in self._d.items() if k not in self._seen}

    def _list(self, key: str, required: bool) -> list[Any]:
        v = self._get(key, required)
        if v is None and not required:
            return []
        if not isinstance(v, list):
            raise ProtocolError(f"{self._at(key)}: expected an array, got {_kind(v)}")
        return v


def read(value: object, path: str, reader: Callable[[Obj], T]) -> T:
    """Reads a top-level value with ``reader``."""
    return reader(Obj(value, path))


def _kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, Mapping):
        return "an object"
    return type(v).__name__
