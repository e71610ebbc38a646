"""The Mitogen strategy (ansible/strategy_plugins/mitogen_linear.py) imports the project's
Jinja2 filters in ansible-playbook before any worker forks, so a worker inherits them
instead of importing every filter file of the collection for each task."""

import json
import os
import subprocess
import sys

from tests.paths import REPO

FILTERS = REPO / "ansible/collections/ansible_collections/metalslurm/cluster/plugins/filter"
PREFIX = "ansible_collections.metalslurm.cluster.plugins.filter."

# What ansible-playbook has set up when a strategy runs: the configuration and the
# collection finder over the configured paths.
PROBE = """
import json, sys
from ansible import constants as C
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=C.COLLECTIONS_PATHS)._install()
sys.path.insert(0, sys.argv[1])
import mitogen_linear
loaded = lambda: sorted(m for m in sys.modules if m.startswith(sys.argv[2]))
before = loaded()
mitogen_linear.preload_jinja_plugins()
print(json.dumps({"collections": mitogen_linear.project_collections(),
                  "before": before, "after": loaded()}))
"""


def test_the_collections_filters_are_imported_before_workers_fork():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "ansible/strategy_plugins"),
                           PREFIX], capture_output=True, text=True, env=env, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    files = sorted(PREFIX + path.stem for path in FILTERS.glob("*.py") if path.stem != "__init__")
    assert seen["collections"] == ["metalslurm.cluster"]
    assert seen["before"] == []
    assert seen["after"] == files
    assert len(files) >= 9  # topology, slurm, gpu, nccl, elastic, ...
