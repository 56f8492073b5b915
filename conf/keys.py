"""`python -m conf.keys <group>`: each key of a config group with its type, default (`(yaml)`: the group's YAML file
gives it), range and help, read from the schema's fields; `python -m conf.keys` lists the groups."""

from __future__ import annotations

import sys
from dataclasses import MISSING as NO_DEFAULT
from enum import Enum
from typing import Any, get_args

from omegaconf import MISSING

from conf.schema import (
    GpuConfig,
    GuardConfig,
    LoraConfig,
    PromoteConfig,
    RootConfig,
    StageConfig,
    TinyModelConfig,
    record_of,
    schema_fields,
)

# The blocks that are open in the root schema and typed by their own records (conf.schema.typed_blocks)
BLOCKS = {"model.tiny": TinyModelConfig, "model.lora": LoraConfig, "gpu": GpuConfig, "curriculum.guard": GuardConfig,
          "curriculum.stages": StageConfig, "curriculum.stages.promote": PromoteConfig,
          "curriculum.stages.guard": GuardConfig}


def groups() -> dict[str, type]:
    """Every group a listing takes, by its dotted name (`root`: the root's own keys)."""
    found: dict[str, type] = {"root": RootConfig}
    found.update({dotted: record for dotted, _, kind in schema_fields(RootConfig)
                  if (record := record_of(kind)) is not None})
    found.update(BLOCKS)
    return found


def type_name(kind: Any) -> str:
    """A field's type as a line shows it: an Enum as its names."""
    choices = [arg for arg in (kind, *get_args(kind)) if isinstance(arg, type) and issubclass(arg, Enum)]
    if choices:
        names = " | ".join(str(member) for member in choices[0])
        return f"{names} | null" if type(None) in get_args(kind) else names
    return str(kind).replace("typing.", "") if not isinstance(kind, type) else kind.__name__


def key_lines(group: str) -> list[str]:
    """One line per key of `group`: `<key>  <type>  default <value>  [range]  <help>`; KeyError for none."""
    record = groups()[group]
    prefix = "" if group == "root" else f"{group}."
    lines = []
    for dotted, item, kind in schema_fields(record):
        if group == "root" and "." in dotted:
            continue  # the root's own keys; a group's keys are its own listing
        default = item.default if item.default_factory is NO_DEFAULT else item.default_factory()
        shown = "(yaml)" if default == MISSING else ("null" if default is None else str(default))
        within = item.metadata.get("range")
        parts = [f"{prefix}{dotted}", type_name(kind), f"default {shown}"]
        parts += [f"range {within}"] if within is not None else []
        lines.append("  ".join([*parts, item.metadata.get("help", "")]))
    return lines


def main(argv: list[str]) -> int:
    known = groups()
    if len(argv) != 1 or argv[0] not in known:
        usage = f"usage: python -m conf.keys <group>; groups: {', '.join(known)}"
        print(usage, file=sys.stderr if argv else sys.stdout)
        return 2 if argv else 0
    print("\n".join(key_lines(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
