"""Node image recipe: the host's mirror is found, and the cache key follows the recipe."""

from pathlib import Path

from infra.providers import images
from infra.providers.images import AptSources, host_apt_sources, image_ref, sources_list

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "apt"


def test_deb822_sources():
    assert host_apt_sources(FIXTURES / "deb822") == AptSources(
        "http://mirror.example/debian", "http://security.example/debian-security")


def test_one_line_sources():
    assert host_apt_sources(FIXTURES / "oneline") == AptSources(
        "http://old.example/debian", "http://old.example/debian-security")


def test_no_sources_falls_back_to_debian(tmp_path):
    assert host_apt_sources(tmp_path) == AptSources(images.DEFAULT_MIRROR, None)


def test_sources_list_for_the_node_suite():
    assert sources_list("trixie", AptSources("http://m/debian", "http://s/ds")) == (
        "deb http://m/debian trixie main\n"
        "deb http://m/debian trixie-updates main\n"
        "deb http://s/ds trixie-security main\n")


def test_image_tag_changes_with_the_recipe(monkeypatch):
    src = AptSources("http://m/debian", None)
    ref13, ref12 = image_ref("debian13", src), image_ref("debian12", src)
    assert ref13.startswith("localhost/metalslurm-node:trixie-")
    assert ref12.startswith("localhost/metalslurm-node:bookworm-")
    assert image_ref("debian13", src) == ref13
    assert image_ref("debian13", AptSources("http://other/debian", None)) != ref13
    monkeypatch.setattr(images, "PREFETCH_PACKAGES", ("munge",))
    assert image_ref("debian13", src) != ref13
