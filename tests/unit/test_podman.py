"""Container removal survives podman's stop/kill race (seen in CI: 'container state
improper: stopped'), with a stand-in podman that fails the first removal of one
container the way podman 4.3 does."""

import os
import textwrap

import pytest

from infra.providers import podman

FAKE_PODMAN = textwrap.dedent("""\
    #!/bin/sh
    # A stand-in for podman: containers are files in $FAKE_PODMAN_DIR; the container named
    # in $FAKE_PODMAN_STUCK survives $FAKE_PODMAN_FAILURES removals, as podman's race does.
    dir="$FAKE_PODMAN_DIR"
    case "$1 $2" in
      "container exists") [ -e "$dir/$3" ]; exit ;;
    esac
    if [ "$1" = rm ]; then
      shift; while [ "${1#-}" != "$1" ]; do [ "$1" = -t ] && shift; shift; done
      rc=0
      for c in "$@"; do
        fails=$(cat "$dir/.fails" 2>/dev/null || echo 0)
        if [ "$c" = "$FAKE_PODMAN_STUCK" ] && [ "$fails" -lt "$FAKE_PODMAN_FAILURES" ]; then
          echo $(( fails + 1 )) > "$dir/.fails"
          echo "Error: cannot remove container $c as it could not be stopped:" \
               "container state improper: stopped" >&2
          rc=2
        else
          rm -f "$dir/$c"
        fi
      done
      exit $rc
    fi
    exit 1
""")


@pytest.fixture
def fake_podman(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "podman"
    script.write_text(FAKE_PODMAN)
    script.chmod(0o755)
    state = tmp_path / "containers"
    state.mkdir()
    for name in ("c-ctl", "c-gpu-001", "c-gpu-002"):
        (state / name).touch()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PODMAN_DIR", str(state))
    monkeypatch.setenv("FAKE_PODMAN_STUCK", "c-gpu-001")
    return state


def test_a_container_left_by_the_stop_race_is_removed_on_the_next_attempt(fake_podman,
                                                                         monkeypatch):
    monkeypatch.setenv("FAKE_PODMAN_FAILURES", "1")
    podman.remove_containers(["c-ctl", "c-gpu-001", "c-gpu-002"])
    assert sorted(p.name for p in fake_podman.iterdir() if not p.name.startswith(".")) == []


def test_a_container_that_cannot_be_removed_is_named(fake_podman, monkeypatch):
    monkeypatch.setenv("FAKE_PODMAN_FAILURES", "5")
    with pytest.raises(podman.PodmanError, match="could not remove container.s. c-gpu-001: "
                       "Error: cannot remove container c-gpu-001"):
        podman.remove_containers(["c-ctl", "c-gpu-001", "c-gpu-002"])
    assert sorted(p.name for p in fake_podman.iterdir() if not p.name.startswith(".")) == [
        "c-gpu-001"]


def test_the_pulumi_delete_steps_need_only_the_clusters_name(fake_podman, monkeypatch, tmp_path):
    """A stack's delete runs with the environment of an older update: removing a node must
    not depend on the plan that update passed (METALSLURM_PLAN is not set here)."""
    from infra.providers import local_resources

    monkeypatch.setenv("FAKE_PODMAN_FAILURES", "0")
    monkeypatch.delenv("METALSLURM_PLAN", raising=False)
    rc = local_resources.main(["--state-dir", str(tmp_path / "st"), "remove-node",
                               "--cluster", "c", "gpu-002"])
    assert rc == 0
    assert sorted(p.name for p in fake_podman.iterdir() if not p.name.startswith(".")) == [
        "c-ctl", "c-gpu-001"]
