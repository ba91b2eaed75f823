#!/usr/bin/env python3
"""values.yaml is documented key by key, and the chart's README lists every key.

  check_values_docs.py helm/argus

Every mapping key of values.yaml (not the keys inside list items, which are
examples of the list's type) must have a comment line right above it, and each
key's dotted path must appear in README.md as `path` (the values table).
"""
import os
import re
import sys

import yaml


def keys_with_comments(path):
    values = yaml.safe_load(open(path))
    stack, found, prev = [], [], ""
    for n, line in enumerate(open(path).read().split("\n"), 1):
        m = re.match(r"^(\s*)([A-Za-z][\w.]*):", line)
        if m:
            depth = len(m.group(1)) // 2
            candidate = stack[:depth] + [m.group(2)]
            node = values
            try:
                for part in candidate:
                    node = node[part]
            except (TypeError, KeyError):
                node = None  # a key inside a list item
            if node is not None or _is_null_leaf(values, candidate):
                stack = candidate
                found.append((n, ".".join(stack), prev.strip().startswith("#")))
        prev = line
    return found


def _is_null_leaf(values, path):
    node = values
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return isinstance(node, dict) and path[-1] in node


def main(chart):
    problems = []
    readme = open(os.path.join(chart, "README.md")).read()
    keys = keys_with_comments(os.path.join(chart, "values.yaml"))
    for n, key, commented in keys:
        if not commented:
            problems.append(f"values.yaml:{n}: {key} has no comment above it")
        if f"`{key}`" not in readme and not any(f"`{k}`" in readme for _, k, _ in keys if k.startswith(key + ".")):
            problems.append(f"README.md does not list `{key}`")
    for p in problems:
        print("FAIL", p)
    print(f"{len(keys)} keys, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
