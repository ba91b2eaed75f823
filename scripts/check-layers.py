#!/usr/bin/env python3
"""Checks that the agent's includes go down its layers (cmake/layers.txt).

Each folder (a room) belongs to one layer; layers are listed lowest first. A file
in a layered folder may include a header of its own layer or of a lower one:
including one of a higher layer (a backwards include) is an error, and so is a
cycle between folders, of the same layer or not (two rooms that include each
other are one room, or one of them is in the wrong place), and between the
top-level folders they live in. Also refused: a
layered file that includes a header outside every layer (the simulator, the
tests), a folder that is listed twice, and a folder of the agent's trees
(userspace/, exporters/, rdma/, app/) with sources that no layer lists, so that a
new room cannot slip past the check.

Run by the build before any layer compiles (cmake/ArgusLayers.cmake) and by ctest.
Prints one line per problem and exits 1 when there is any; 0 and nothing else
when the tree is clean. Includes are taken as `#include "path"` with the path
from the project's top, or a bare file name for one in the same folder.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = ('.h', '.hpp', '.c', '.cpp')
# Trees where every folder with sources must belong to a layer.
AGENT_TREES = ('userspace', 'exporters', 'rdma', 'app')


def read_layers(path):
    """[(layer, [folders])] lowest first, and the problems the file itself has."""
    layers, problems, owner = [], [], {}
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.split('#', 1)[0].split()
            if not line:
                continue
            layer, folders = line[0], [d.rstrip('/') for d in line[1:]]
            for d in folders:
                if d in owner:
                    problems.append(f'{path}:{n}: folder {d} is in layer {owner[d]} already')
                owner[d] = layer
            layers.append((layer, folders))
    return layers, problems


def sources_of(root, folder):
    """The folder's own source files (not its subfolders': they are rooms of their own)."""
    full = os.path.join(root, folder)
    if not os.path.isdir(full):
        return []
    return sorted(f for f in os.listdir(full)
                  if f.endswith(SOURCE_SUFFIXES) and os.path.isfile(os.path.join(full, f)))


def includes_of(path):
    """(line number, included path) of each quoted include."""
    with open(path, errors='replace') as f:
        text = f.read()
    return [(text.count('\n', 0, m.start()) + 1, m.group(1)) for m in INCLUDE.finditer(text)]


def find_cycles(edges):
    """Strongly connected components of more than one folder (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(root, layers_file):
    layers, problems = read_layers(layers_file)
    rank = {}
    layer_of = {}
    for i, (layer, folders) in enumerate(layers):
        rank[layer] = i
        for d in folders:
            layer_of[d] = layer

    for tree in AGENT_TREES:
        for dirpath, dirnames, _ in os.walk(os.path.join(root, tree)):
            dirnames.sort()
            folder = os.path.relpath(dirpath, root)
            if sources_of(root, folder) and folder not in layer_of:
                problems.append(f'{folder}/: has sources but no layer in {os.path.relpath(layers_file, root)}')

    edges = {}
    for folder in sorted(layer_of):
        own = layer_of[folder]
        for name in sources_of(root, folder):
            path = os.path.join(folder, name)
            for line, inc in includes_of(os.path.join(root, path)):
                target = os.path.dirname(inc) if '/' in inc else folder
                if target == folder:
                    continue
                if target not in layer_of:
                    if os.path.exists(os.path.join(root, inc)):
                        problems.append(f'{path}:{line}: includes {inc}, which is in no layer')
                    continue
                edges.setdefault(folder, set()).add(target)
                theirs = layer_of[target]
                if rank[theirs] > rank[own]:
                    problems.append(f'{path}:{line}: includes {inc} of layer {theirs} from layer {own}: '
                                    f'includes go down the layers only')

    for cycle in find_cycles(edges):
        problems.append('folders include each other: ' + ' <-> '.join(cycle))
    # The same between top-level folders (userspace/, rdma/, exporters/, app/):
    # the tree's own structure says which way the data goes.
    tops = {}
    for a, targets in edges.items():
        for b in targets:
            ta, tb = a.split('/')[0], b.split('/')[0]
            if ta != tb:
                tops.setdefault(ta, set()).add(tb)
    for cycle in find_cycles(tops):
        problems.append('top-level folders include each other: ' + ' <-> '.join(cycle))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--root', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    ap.add_argument('--layers', help='the layers file (default: ROOT/cmake/layers.txt)')
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    problems = check(root, args.layers or os.path.join(root, 'cmake', 'layers.txt'))
    for p in problems:
        print(f'check-layers: {p}', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
