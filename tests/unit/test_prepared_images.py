"""Prepared node images: what the builder's stack keeps, what names an image, where a
builder's subnet goes (infra/providers/prepared.py, infra/ops/image.py)."""

from pathlib import Path

import pytest
import yaml

from infra.ops.image import stack_kinds
from infra.providers import prepared
from infra.providers.prepared import (
    PreparedImageError,
    builder_config,
    free_builder_subnet,
    image_inputs,
    image_line,
    kind_of,
    plan_images,
    roles_digest,
)
from infra.stack.config import ConfigError, parse_config
from infra.stack.inventory import NodeSpec
from tests.paths import REPO

BASE = "localhost/metalslurm-node:trixie-000000000000"
LOCAL_STACK = REPO / "Pulumi.local.yaml"


def local_raw() -> dict:
    return yaml.safe_load(LOCAL_STACK.read_text())["config"]


def refs(raw: dict, kinds=("controller", "compute", "login"), digest="d") -> list[str]:
    builder = builder_config(raw, REPO)
    return [prepared.image_ref("trixie", k, image_inputs(BASE, builder, k, digest))
            for k in kinds]


def test_the_builder_keeps_the_install_settings_and_drops_the_cluster():
    raw = local_raw()
    builder = builder_config(raw, REPO)
    assert builder["metalslurm:os"] == "debian13"
    assert builder["metalslurm:containers"]["artifacts"] == raw["metalslurm:containers"][
        "artifacts"]
    assert builder["metalslurm:containers"]["mirror"] == str((REPO / "../shared/vendor").resolve())
    # one elastic compute node (the stack has elastic nodes), one login node, no users
    assert builder["metalslurm:computePools"] == [
        {"name": "gpu", "count": 0, "elasticCount": 1, "gpuType": "h100", "gpuCount": 8}]
    assert builder["metalslurm:login"] == {"count": 1}
    for dropped in ("users", "partitions", "topology", "elastic", "health"):
        assert f"metalslurm:{dropped}" not in builder
    assert builder["metalslurm:clusterName"] == "msimage"


def test_the_builder_stack_is_a_valid_local_stack():
    cfg = parse_config(prepared.with_network(builder_config(local_raw(), REPO), "msimg-1",
                                             "10.79.3.0/24"), base_dir=REPO,
                       check_artifacts=False)
    assert (cfg.cluster_name, str(cfg.private_cidr)) == ("msimg-1", "10.79.3.0/24")
    assert [p.elastic_count for p in cfg.compute_pools] == [1]


def test_a_stack_without_elastic_nodes_builds_from_a_static_one():
    raw = local_raw()
    raw["metalslurm:computePools"] = [{"name": "a100", "count": 3, "gpuType": "a100",
                                       "gpuCount": 4}]
    raw.pop("metalslurm:login")
    builder = builder_config(raw, REPO)
    assert builder["metalslurm:computePools"] == [
        {"name": "gpu", "count": 1, "elasticCount": 0, "gpuType": "a100", "gpuCount": 4}]
    assert "metalslurm:login" not in builder


def test_clusters_that_differ_only_outside_the_install_settings_share_images():
    raw = local_raw()
    other = {**raw, "metalslurm:clusterName": "other", "metalslurm:privateCidr": "10.9.9.0/24",
             "metalslurm:users": [{"name": "zed", "uid": 3000}],
             "metalslurm:elastic": {"suspendTime": 15},
             "metalslurm:monitoring": {"scrapeInterval": 5},
             "metalslurm:computePools": [{"name": "gpu", "count": 5, "elasticCount": 3,
                                          "gpuType": "h100", "gpuCount": 8}]}
    assert refs(other) == refs(raw)


def test_the_small_clusters_modules_use_the_debian13_clusters_images():
    """tests/e2e's clusters on Debian 13 share one builder, so the suite builds their
    prepared images once (the small cluster of the backup controller and the machines made
    anew builds none of its own)."""
    stacks = REPO / "tests" / "e2e" / "stacks"
    builders = [builder_config(yaml.safe_load((stacks / f"Pulumi.e2e-{name}.yaml").read_text())[
        "config"], stacks) for name in ("debian13", "ha")]
    assert builders[0] == builders[1]


@pytest.mark.parametrize("change", [
    {"metalslurm:os": "debian12"},
    {"metalslurm:monitoring": {"enabled": False}},
    {"metalslurm:containers": {"enabled": False}},
    {"metalslurm:gpu": {"mode": "off"}},
], ids=["os", "monitoring off", "containers off", "gpu off"])
def test_an_install_setting_names_other_images(change):
    raw = local_raw()
    assert refs({**raw, **change}) != refs(raw)


def test_a_line_is_the_install_settings_and_kind_not_the_roles_or_the_cluster():
    """A build prunes older images of its own line only: a roles change stays in the line
    (the older image goes), another stack's install settings are another line (kept)."""
    raw = local_raw()
    line = image_line(builder_config(raw, REPO), "compute")
    renamed = {**raw, "metalslurm:clusterName": "other", "metalslurm:privateCidr": "10.9.0.0/24"}
    assert image_line(builder_config(renamed, REPO), "compute") == line
    assert image_line(builder_config(raw, REPO), "login") != line
    assert image_line(builder_config({**raw, "metalslurm:gpu": {"mode": "off"}}, REPO),
                      "compute") != line
    assert len(line) == 12 and int(line, 16) >= 0


def test_every_kind_has_its_own_image_and_the_roles_name_it():
    raw = local_raw()
    controller, compute, login = refs(raw)
    assert controller.startswith("localhost/metalslurm-prepared:trixie-controller-")
    assert len({controller, compute, login}) == 3
    assert refs(raw, digest="other roles") != refs(raw)
    assert [i.kind for i in plan_images(BASE, builder_config(raw, REPO), ["login"], "trixie")] \
        == ["login"]


def test_the_roles_digest_follows_tasks_not_templates(tmp_path):
    role = tmp_path / "roles" / "r"
    for part in ("tasks", "templates", "defaults"):
        (role / part).mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text("- name: a\n")
    (role / "templates" / "x.j2").write_text("one\n")
    (role / "defaults" / "main.yml").write_text("r_packages: [a]\n")
    first = roles_digest(tmp_path)
    (role / "templates" / "x.j2").write_text("two\n")
    assert roles_digest(tmp_path) == first
    (role / "defaults" / "main.yml").write_text("r_packages: [a, b]\n")
    assert roles_digest(tmp_path) != first


def test_the_roles_digest_leaves_out_the_caches_tools_write(tmp_path):
    """ruff, mypy and pip write caches beside the roles' own programs while a cluster is
    brought up (lint runs beside the e2e lanes): the images stay the same."""
    files = tmp_path / "roles" / "r" / "files" / "program"
    files.mkdir(parents=True)
    (files / "main.py").write_text("print()\n")
    first = roles_digest(tmp_path)
    for cache in (".ruff_cache", ".mypy_cache", "program.egg-info"):
        (files / cache).mkdir()
        (files / cache / "CACHEDIR.TAG").write_text("Signature\n")
    assert roles_digest(tmp_path) == first
    (files / "main.py").write_text("print(1)\n")
    assert roles_digest(tmp_path) != first


def test_the_roles_digest_reads_the_roles_through_their_link():
    files = {str(p) for p in prepared.digest_files()}
    assert "roles/munge/tasks/install.yml" in files
    assert "roles/munge/defaults/main.yml" in files
    assert "site.yml" in files and "image.yml" in files
    assert not any("/templates/" in f or "/handlers/" in f for f in files)


def test_a_builder_takes_the_first_free_subnet():
    assert free_builder_subnet([]) == "10.79.0.0/24"
    assert free_builder_subnet(["10.79.0.0/24", "10.79.1.0/25", "10.88.0.0/16"]) == \
        "10.79.2.0/24"
    with pytest.raises(PreparedImageError, match="no free /24"):
        free_builder_subnet(["10.79.0.0/16"])


def test_node_kinds_follow_the_groups():
    specs = [NodeSpec(name="ctl", address="a", groups=("slurm_controller", "slurmdbd")),
             NodeSpec(name="g1", address="b", groups=("slurm_compute",)),
             NodeSpec(name="g2", address="c", groups=("slurm_compute",)),
             NodeSpec(name="l1", address="d", groups=("login",))]
    assert stack_kinds(specs) == ["controller", "compute", "login"]
    assert kind_of(("nfs_server",)) == "nfs"
    with pytest.raises(PreparedImageError, match="no node kind"):
        kind_of(("bastion",))


def test_prepared_images_can_be_turned_off_and_only_with_a_boolean():
    raw = local_raw()
    assert parse_config(raw, base_dir=REPO, check_artifacts=False).local.prepared_images
    off = {**raw, "metalslurm:local": {"preparedImages": False}}
    assert not parse_config(off, base_dir=REPO, check_artifacts=False).local.prepared_images
    with pytest.raises(ConfigError, match=r"metalslurm:local.preparedImages: must be true"):
        parse_config({**raw, "metalslurm:local": {"preparedImages": "no"}}, base_dir=REPO,
                     check_artifacts=False)


def test_every_handler_stands_aside_in_an_image_build():
    """ansible/image.yml sets metalslurm_image_build: a handler that restarted a daemon
    whose configuration the install phase does not write would fail the build."""
    guard = "not (metalslurm_image_build | default(false) | bool)"
    handlers = sorted(Path(REPO, "ansible", "roles").glob("*/handlers/main.yml"))
    assert len(handlers) >= 10
    for path in handlers:
        for handler in yaml.safe_load(path.read_text()):
            when = handler.get("when")
            conditions = when if isinstance(when, list) else [when]
            assert guard in conditions, f"{path}: handler {handler['name']!r} lacks the guard"


def test_the_build_lock_is_one_per_machine_and_refuses_a_link(tmp_path, monkeypatch):
    storage = tmp_path / "containers"
    storage.mkdir()
    monkeypatch.setattr(prepared, "PODMAN_STORAGE", storage)
    with prepared.build_lock(tmp_path / "checkout"):
        assert (storage / "metalslurm-image-build.lock").exists()
    assert not (tmp_path / "checkout").exists()
    (storage / "metalslurm-image-build.lock").unlink()
    (storage / "metalslurm-image-build.lock").symlink_to(tmp_path / "victim")
    with pytest.raises(OSError), prepared.build_lock(tmp_path / "checkout"):
        pass
    assert not (tmp_path / "victim").exists()


def test_a_mirror_elsewhere_names_the_same_images_when_every_artifact_is_pinned():
    """A CI machine or another checkout keeps the offline mirror at another path: with
    every artifact pinned by sha256 the images are the same bytes, so the same names."""
    raw = local_raw()
    moved = {**raw, "metalslurm:containers": {**raw["metalslurm:containers"],
                                              "mirror": "/elsewhere/vendor"}}
    assert builder_config(moved, REPO)["metalslurm:containers"]["mirror"] == "/elsewhere/vendor"
    assert refs(moved) == refs(raw)
    assert image_line(builder_config(moved, REPO), "compute") == image_line(
        builder_config(raw, REPO), "compute")
    # An unpinned artifact is whatever its mirror holds: then the mirror names the images.
    artifacts = dict(raw["metalslurm:containers"]["artifacts"])
    artifacts["pyxis"] = {}
    unpinned = {**raw, "metalslurm:containers": {**raw["metalslurm:containers"],
                                                 "pinnedOnly": False, "artifacts": artifacts}}
    unpinned_moved = {**unpinned, "metalslurm:containers": {
        **unpinned["metalslurm:containers"], "mirror": "/elsewhere/vendor"}}
    assert refs(unpinned_moved) != refs(unpinned)
