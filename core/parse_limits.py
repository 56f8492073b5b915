"""JSON and YAML someone else may have written, parsed within limits: deep nesting makes json.loads raise a bare
RecursionError, and a few lines of YAML aliases expand into billions of nodes; such a file is refused in one line.
"""

from __future__ import annotations

import json
import re

import yaml

MAX_DEPTH = 64  # levels of nesting (objects and arrays; YAML mappings and sequences, aliases expanded)
MAX_ALIASES = 100  # YAML aliases in one document
MAX_YAML_NODES = 100_000  # a YAML document's values with every alias expanded: a resolved config holds ~1,000
MAX_YAML_BYTES = 4 * 1024 * 1024  # a resolved config.yaml is tens of kilobytes

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # a bracket inside a string nests nothing
_JSON_BRACKET = re.compile(r"[\[\]{}]")


class ParseLimitError(ValueError):
    """A document beyond a limit; a ValueError, as unreadable JSON or YAML is to every reader that skips it."""


def json_depth(text: str) -> int:
    """How deep `text`'s arrays and objects nest (0: a plain value), counted without parsing it.

    >>> json_depth('{"a": [1, {"b": "[[["}]}'), json_depth("3")
    (3, 0)
    """
    depth = deepest = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json(text: str, source: str):
    """json.loads(`text`), refused (ParseLimitError naming `source`) when it nests deeper than MAX_DEPTH."""
    # text cannot nest deeper than it has openings: a metrics row (one object) is never scanned
    if text.count("[") + text.count("{") > MAX_DEPTH and json_depth(text) > MAX_DEPTH:
        raise ParseLimitError(f"{source}: JSON nested deeper than {MAX_DEPTH} levels; not read")
    return json.loads(text)


class _LimitedLoader(yaml.SafeLoader):
    """yaml's SafeLoader, measuring as it composes: aliases met, nesting, each node's size and depth expanded."""

    def __init__(self, stream, source: str):
        super().__init__(stream)
        self.source, self.aliases, self.nesting = source, 0, 0
        self.measured: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, depth), aliases expanded

    def refuse(self, what: str):
        raise ParseLimitError(f"{self.source}: {what}; not read")

    def compose_node(self, parent, index):
        alias = self.check_event(yaml.AliasEvent)
        if alias:
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                self.refuse(f"more than {MAX_ALIASES} YAML aliases (*name)")
        self.nesting += 1
        try:
            if self.nesting > MAX_DEPTH:  # before composing deeper: the composer recurses per level
                self.refuse(f"YAML nested deeper than {MAX_DEPTH} levels")
            node = super().compose_node(parent, index)
        finally:
            self.nesting -= 1
        if not alias:
            self.measure(node)
        elif id(node) not in self.measured:  # the anchor's node is still being composed: it would contain itself
            self.refuse("a YAML alias inside the value its anchor names (a value that contains itself)")
        return node

    def measure(self, node) -> None:
        """Record `node`'s size and depth from its children's (composed, so measured, before it)."""
        if isinstance(node, yaml.ScalarNode):
            children: list = []
        else:
            children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
        sizes = [self.measured[id(child)] for child in children]
        nodes, depth = 1 + sum(n for n, _ in sizes), (1 + max(d for _, d in sizes)) if sizes else 0
        if nodes > MAX_YAML_NODES:
            self.refuse(f"more than {MAX_YAML_NODES} YAML values with its aliases expanded")
        if depth > MAX_DEPTH:
            self.refuse(f"YAML nested deeper than {MAX_DEPTH} levels with its aliases expanded")
        self.measured[id(node)] = (nodes, depth)


def parse_yaml(text: str, source: str):
    """yaml.safe_load(`text`) within the limits (ParseLimitError naming `source`)."""
    size = len(text.encode())
    if size > MAX_YAML_BYTES:
        raise ParseLimitError(f"{source}: {size} bytes, over the {MAX_YAML_BYTES} a config holds; not read")
    loader = _LimitedLoader(text, source)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
