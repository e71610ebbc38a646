"""Root never writes through a path a user can write (make lint).

A task that writes, creates or changes the owner of a path under a directory users can write
(homes, /shared, /tmp, /var/tmp, /dev/shm) runs as a user (``become_user`` other than root)
or uses the collection's ``home_block`` module, which refuses links, FIFOs, devices and hard
links. Ansible's own modules do not: ``file`` with ``owner=`` changes a link's target, and
``blockinfile``/``lineinfile``/``copy``/``template`` resolve links (docs/reference/security.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import REPO, ROLES

# Where users can create entries: their homes, the shared paths (1777 by default,
# roles/nfs_server), and the world-writable temporary directories.
USER_WRITABLE = ("/home/", "/shared/", "/tmp/", "/var/tmp/", "/dev/shm/", "~/", "~")
# Modules that write, create or chown the path named by one of these arguments.
WRITERS = {"file": ("path", "dest", "name"), "copy": ("dest",), "template": ("dest",),
           "blockinfile": ("path", "dest"), "lineinfile": ("path", "dest"),
           "replace": ("path", "dest"), "assemble": ("dest",), "unarchive": ("dest",),
           "get_url": ("dest",), "ini_file": ("path", "dest"), "fetch": ("dest",),
           "slurp": ("src",), "archive": ("dest",), "acl": ("path",), "mount": ("path",)}
SAFE_MODULES = {"metalslurm.cluster.home_block"}


def module_of(task: dict) -> tuple[str, Any] | None:
    for key, value in task.items():
        short = key.rsplit(".", 1)[-1]
        if short in WRITERS and (key == short or key.startswith(("ansible.builtin.",
                                                                 "ansible.posix.",
                                                                 "community.general."))):
            return short, value
    return None


def unsafe_write(task: dict) -> str | None:
    """The user-writable path a task writes as root, or None."""
    found = module_of(task)
    if not found or (task.get("become_user") not in (None, "root")):
        return None
    short, args = found
    if not isinstance(args, dict):
        return None
    for key in WRITERS[short]:
        value = args.get(key)
        if isinstance(value, str) and value.strip().strip("\"'").startswith(USER_WRITABLE):
            return value
    return None


def tasks_in(doc: Any) -> list[dict]:
    tasks = []
    for item in doc or []:
        if isinstance(item, dict):
            tasks.append(item)
            for section in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks",
                            "handlers"):
                tasks += tasks_in(item.get(section))
    return tasks


TASK_FILES = sorted([*ROLES.glob("*/tasks/*.yml"), *ROLES.glob("*/handlers/*.yml"),
                     *(REPO / "ansible").glob("*.yml")])


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_task_writes_a_user_writable_path_as_root(path: Path):
    offending = [f"{task.get('name', '?')}: {unsafe_write(task)}"
                 for task in tasks_in(yaml.safe_load(path.read_text())) if unsafe_write(task)]
    assert not offending, (f"{path.relative_to(REPO)} writes under a user-writable directory as "
                           f"root (use metalslurm.cluster.home_block or become_user): {offending}")


@pytest.mark.parametrize(("task", "flagged"), [
    ({"ansible.builtin.file": {"path": "/home/{{ item.name }}/.ssh", "owner": "x"}},
     "/home/{{ item.name }}/.ssh"),
    ({"ansible.builtin.blockinfile": {"path": "/shared/metalslurm/x", "block": "y"}},
     "/shared/metalslurm/x"),
    ({"copy": {"dest": "/tmp/x", "content": "y"}}, "/tmp/x"),
    ({"ansible.builtin.template": {"dest": "~/.config/x", "src": "y"}}, "~/.config/x"),
    ({"ansible.builtin.file": {"path": "/home/x/.ssh"}, "become_user": "root"}, "/home/x/.ssh"),
    # Run as the user, or through the module that refuses links: allowed.
    ({"ansible.builtin.file": {"path": "/home/x/.ssh"}, "become_user": "x"}, None),
    ({"metalslurm.cluster.home_block": {"user": "x", "path": ".ssh/authorized_keys"}}, None),
    # Root's own places, and the shared directory itself (its parent is root's).
    ({"ansible.builtin.template": {"dest": "/etc/slurm/slurm.conf"}}, None),
    ({"ansible.builtin.file": {"path": "/home", "state": "directory"}}, None),
])
def test_the_rule_flags_root_writes_under_user_directories_only(task, flagged):
    assert unsafe_write(task) == flagged


def test_the_tasks_that_write_into_homes_are_seen_by_the_rule():
    """The rule reads the task files that write into homes (it would pass vacuously if the
    task shapes changed under it): each such task is a home_block task it recognises."""
    homes = [task for path in TASK_FILES for task in tasks_in(yaml.safe_load(path.read_text()))
             if any(k in SAFE_MODULES for k in task)]
    assert {re.sub(r"\s+", " ", t["name"]) for t in homes} == {
        "Write each user's keys into their authorized_keys",
        "Remove the managed keys of the users removed from the config",
        "Write the registry credentials into each cluster user's Enroot credentials file",
    }
