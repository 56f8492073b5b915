"""What the schema says of each key beside its type, declared on the key's field (as TRL's GRPOConfig does):
one line of help, the range of a number, and whether the key leaves what is trained unchanged (`resume_free`:
a run may resume with another value). The range check, the resume hash and `python -m conf.keys` read them here.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import Field, dataclass, field, fields, is_dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints

from omegaconf import MISSING, OmegaConf

from core.checks import is_int, is_number


@dataclass(frozen=True)
class Range:
    """Numbers from `low` to `high` (None: unbounded), each end open or closed; `whole`: whole numbers only;
    `what`, where given, says the range in a refusal (`<key>: <value> is not <what>`)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    whole: bool = False
    what: str = ""

    def holds(self, value: Any) -> bool:
        if not (is_int(value) if self.whole else is_number(value)):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        low = "-inf" if self.low is None else _number(self.low)
        return f"{'(' if self.low_open else '['}{low}, {_number(self.high)}{')' if self.high_open else ']'}"

    def describe(self, help: str = "") -> str:
        """The range as a refusal says it: `what`, or the numbers it holds and the key's `help`."""
        numbers = f"a {'whole number' if self.whole else 'number'} {'' if self.high is None else 'in '}{self}"
        return self.what or (f"{numbers} ({help})" if help else numbers)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


COUNT = Range(0, low_open=True, whole=True)  # a whole number > 0
NON_NEGATIVE = Range(0)


def key(default: Any = MISSING, help: str = "", *, within: Range | None = None, resume_free: bool = False,
        factory: Any = None) -> Any:
    """A schema field: its default (MISSING: the group's YAML gives it; `factory` for a mutable one), its one line
    of `help`, its range and whether it is `resume_free`."""
    metadata = {"help": help, "range": within, "resume_free": resume_free}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def record_of(kind: Any) -> type | None:
    """The record a field of type `kind` holds (`X` or `X | None`), None for any other type."""
    if get_origin(kind) in (Union, types.UnionType):
        records = [arg for arg in get_args(kind) if isinstance(arg, type) and is_dataclass(arg)]
        return records[0] if len(records) == 1 else None
    return kind if isinstance(kind, type) and is_dataclass(kind) else None


def schema_fields(record: type, prefix: str = "") -> Iterator[tuple[str, Field, Any]]:
    """(dotted key, field, type) of every key of `record`, a nested record's keys after its own."""
    hints = get_type_hints(record)
    for item in fields(record):
        dotted = f"{prefix}{item.name}"
        yield dotted, item, hints[item.name]
        nested = record_of(hints[item.name])
        if nested is not None:
            yield from schema_fields(nested, f"{dotted}.")


def resume_free_keys(record: type) -> tuple[str, ...]:
    """The dotted keys of `record` marked `resume_free`."""
    return tuple(dotted for dotted, item, _ in schema_fields(record) if item.metadata.get("resume_free"))


def default_of(item: Field) -> Any:
    """A field's default as the schema gives it (MISSING where the group's YAML gives it)."""
    if item.default_factory is not NO_DEFAULT:
        return item.default_factory()
    return item.default


def with_defaults(record: type, block: Any) -> dict:
    """A block (a config node or plain data) as plain data merged onto its `record`: each key it leaves out at the
    record's default."""
    return OmegaConf.to_container(_merged(record, block), resolve=True, enum_to_str=True)


def as_record(record: type, node: Any) -> Any:
    """A config group (`node`) as an instance of its schema `record`, the values it holds checked by their types:
    what the code reads is the schema's record, not a copy of its fields."""
    return OmegaConf.to_object(_merged(record, node))


def _merged(record: type, block: Any) -> Any:
    """`block` merged onto `record`, its interpolations resolved first (they may point outside the block)."""
    plain = OmegaConf.to_container(block, resolve=True) if OmegaConf.is_config(block) else block
    return OmegaConf.merge(OmegaConf.structured(record), plain)
