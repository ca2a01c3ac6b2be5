"""YAML that a user wrote, loaded with bounds: run.yaml, site.yaml and the config files preflight
reads. Standard library + PyYAML only, so the run directory's readers and the hooks can use it
without the pydantic models of ``slurmctl.config.models``.
"""

from __future__ import annotations

from typing import Any

import yaml

from slurmctl.errors import YAMLTooLarge

# run.yaml is small; these caps bound what a hostile or broken file can cost to load (an alias
# bomb constructs cheaply but expands exponentially when validated or dumped).
MAX_YAML_BYTES = 1024 * 1024
MAX_YAML_NODES = 100_000


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """How many nodes the document has once every alias is expanded, counted without expanding
    (each node's size is computed once; a node reached again through an alias reuses it)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(child)] for child in _children(node)))
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YAMLTooLarge("an alias refers to a value that contains it (a recursive structure)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def bounded_safe_load(text: str, max_nodes: int = MAX_YAML_NODES) -> Any:
    """yaml.safe_load with a cap on the expanded node count: anchors and aliases still work, but a
    "billion laughs" document (aliases nested in aliases) is refused before anything walks it.
    Raises YAMLTooLarge, or yaml.YAMLError for malformed YAML."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        # libyaml's parser (10x faster: `ls` parses one run.yaml per run shown) builds the same node
        # graph, so the cap applies alike; a document it rejects is parsed again by the Python
        # loader so that the error the user reads is the same either way.
        try:
            return _bounded_load(fast(text), max_nodes)
        except yaml.YAMLError:
            pass
    return _bounded_load(yaml.SafeLoader(text), max_nodes)


def _bounded_load(loader, max_nodes: int) -> Any:
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YAMLTooLarge("it is nested too deeply") from None
        if node is None:
            return None
        if _expanded_size(node, max_nodes) > max_nodes:
            raise YAMLTooLarge(f"it expands to more than {max_nodes:,} values (anchors and aliases "
                               "nested inside each other)")
        return loader.construct_document(node)
    finally:
        loader.dispose()
