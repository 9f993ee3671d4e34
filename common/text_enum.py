"""TextEnum: an enum whose members are strings (enum.StrEnum, which Python 3.10 lacks)."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """Members are str: they compare equal to, and JSON and msgpack write them as, their
    values; str() and format() give the value too, as StrEnum's do."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
