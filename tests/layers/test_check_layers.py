#!/usr/bin/env python3
"""scripts/check-layers.py on hand-made trees: each rule it enforces fails a tree
that breaks it, names the file and line, and a clean tree passes."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts', 'check-layers.py')

LAYERS = """# lowest first
model   userspace/common
state   userspace/registry userspace/comms
app     app
"""


def make_tree(root, files, layers=LAYERS):
    os.makedirs(os.path.join(root, 'cmake'))
    with open(os.path.join(root, 'cmake', 'layers.txt'), 'w') as f:
        f.write(layers)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), 'w') as f:
            f.write(text)


def run(files, layers=LAYERS):
    with tempfile.TemporaryDirectory() as root:
        make_tree(root, files, layers)
        p = subprocess.run([sys.executable, CHECKER, '--root', root], capture_output=True, text=True)
        return p.returncode, p.stderr


CLEAN = {
    'userspace/common/clock.h': '#pragma once\n',
    'userspace/registry/registry.h': '#include "userspace/common/clock.h"\n#include "registry_detail.h"\n',
    'userspace/registry/registry_detail.h': '#pragma once\n',
    'userspace/comms/tracker.cpp': '#include "userspace/registry/registry.h"\n#include <map>\n',
    'app/main.cpp': '#include "userspace/comms/tracker.h"\n',
}


class CheckLayers(unittest.TestCase):
    def assert_refused(self, files, says, layers=LAYERS):
        rc, err = run(files, layers)
        self.assertEqual(rc, 1, err)
        self.assertIn(says, err)

    def test_clean_tree_passes(self):
        rc, err = run(CLEAN)
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, '')

    def test_backwards_include_fails_naming_file_and_line(self):
        files = dict(CLEAN)
        files['userspace/common/clock.cpp'] = '#include <vector>\n#include "userspace/registry/registry.h"\n'
        self.assert_refused(files, 'userspace/common/clock.cpp:2: includes userspace/registry/registry.h of layer state '
                      'from layer model')

    def test_cycle_inside_a_layer_fails(self):
        files = dict(CLEAN)
        files['userspace/registry/uses_comms.h'] = '#include "userspace/comms/tracker.h"\n'
        self.assert_refused(files, 'folders include each other: userspace/comms <-> userspace/registry')

    def test_top_level_cycle_fails(self):
        layers = "model userspace/common\nstate exporters\napp userspace/agent\n"
        files = {
            'userspace/common/a.h': '#pragma once\n',
            'exporters/b.h': '#include "userspace/common/a.h"\n',
            'userspace/agent/c.h': '#include "exporters/b.h"\n',
        }
        self.assert_refused(files, 'top-level folders include each other: exporters <-> userspace', layers)

    def test_unlisted_folder_with_sources_fails(self):
        files = dict(CLEAN)
        files['userspace/newroom/x.cpp'] = 'int x;\n'
        self.assert_refused(files, 'userspace/newroom/: has sources but no layer')

    def test_include_outside_every_layer_fails(self):
        files = dict(CLEAN)
        files['sim/sim_gpu.h'] = '#pragma once\n'
        files['userspace/comms/sim_user.cpp'] = '#include "sim/sim_gpu.h"\n'
        self.assert_refused(files, 'userspace/comms/sim_user.cpp:1: includes sim/sim_gpu.h, which is in no layer')

    def test_folder_in_two_layers_fails(self):
        self.assert_refused(CLEAN, 'folder userspace/common is in layer model already', LAYERS + 'export userspace/common\n')


if __name__ == '__main__':
    unittest.main()
