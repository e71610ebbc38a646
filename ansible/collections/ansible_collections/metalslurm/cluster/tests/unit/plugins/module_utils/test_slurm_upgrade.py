"""Slurm's upgrade window and order (module_utils/slurm_upgrade.py): which jumps Slurm can
make, the fewest steps for one it cannot, and the check a configure makes over every Slurm
host before it changes any, fed with what dpkg-query and apt-cache print on Debian."""

from __future__ import annotations

import pytest
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_upgrade import (
    MAJOR_RELEASES,
    HostSlurm,
    jump_problem,
    read_host,
    release_problems,
    releases_between,
    upgrade_path,
    upgrades,
    window,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.slurm_versions import (
    DISTRO_SLURM,
    SlurmVersion,
    SlurmVersionError,
)

V = SlurmVersion.parse
BOOKWORM = "22.05.8-4+deb12u3"
TRIXIE = "24.11.5-1+deb13u1"


def dpkg(version: str, *packages: str) -> str:
    """What the role's read step prints for ``packages`` installed at ``version``."""
    return "".join(f"installed|ii |{p}|slurm-wlm|{version}\n" for p in packages)


def host(name: str, daemons: tuple[str, ...], installed: str | None,
         offered: str | None) -> HostSlurm:
    text = dpkg(installed, "slurm-client") if installed else ""
    return read_host(name, daemons, text + f"offered|{offered or '(none)'}\n")


def test_every_release_a_supported_os_ships_is_in_the_table():
    """The window is counted in this table: a release an OS ships that it lacked would be
    refused on that OS."""
    for entry in DISTRO_SLURM:
        assert SlurmVersion(entry.slurm.major, entry.slurm.minor) in MAJOR_RELEASES, entry.key
    assert list(MAJOR_RELEASES) == sorted(MAJOR_RELEASES)


@pytest.mark.parametrize(("release", "back"), [("22.05", 2), ("24.05", 2), ("24.11", 3),
                                               ("26.05", 3)])
def test_the_window_widens_to_three_releases_at_24_11(release, back):
    assert window(V(release)) == back


@pytest.mark.parametrize(("old", "new"), [
    ("20.11", "22.05"), ("21.08", "22.05"),  # RELEASE_NOTES of 22.05
    ("23.02", "24.11"), ("23.11", "24.11"), ("24.05", "24.11"),  # RELEASE_NOTES of 24.11
    ("24.11", "26.05"),  # three releases: 25.05, 25.11, 26.05
    ("22.05.8", "22.05.9"), ("22.05", "23.02")])
def test_jumps_inside_the_window(old, new):
    assert jump_problem(V(old), V(new)) is None


def test_debian_12_to_debian_13_skips_three_releases_and_names_the_way():
    assert jump_problem(V(BOOKWORM), V(TRIXIE)) == (
        "Slurm 24.11 takes the state of 23.02, 23.11 and 24.05 only (3 releases back), so "
        "22.05 to 24.11 skips 23.02, 23.11 and 24.05; upgrade through 23.11 then 24.11")


def test_ubuntu_22_04_to_debian_13_needs_two_steps():
    assert upgrade_path(V("21.08"), V("24.11")) == (V("23.02"), V("24.11"))
    assert upgrade_path(V("20.02"), V("26.05")) == (V("21.08"), V("23.02"), V("24.11"),
                                                    V("26.05"))
    assert releases_between(V("24.11"), V("22.05")) == (V("23.02"), V("23.11"), V("24.05"))


def test_no_way_back():
    assert jump_problem(V("24.11"), V("24.05")) == (
        "Slurm cannot go back from 24.11 to 24.05: the older release cannot read the state "
        "the newer one wrote")


def test_a_release_after_the_table_is_refused_not_guessed():
    with pytest.raises(SlurmVersionError, match=r"Slurm 27\.05 is not a major release "
                                                r"metalslurm knows \(20\.02, .*, 26\.05\)"):
        jump_problem(V("26.05"), V("27.05"))
    assert "older than any release metalslurm knows" in jump_problem(V("19.05"), V("22.05"))


def test_read_host_reads_dpkg_and_apt_cache():
    """What ${source:Package} prints is the source's name alone; a removed package (rc) and
    another source's are not Slurm's; the libraries are left out (below)."""
    text = (dpkg(BOOKWORM, "slurmctld", "slurm-client", "slurm-wlm-basic-plugins")
            + "installed|rc |slurmd|slurm-wlm|21.08.5-2\n"  # removed, its config kept
            + "installed|ii |munge|munge|0.5.15-2\n"
            + "offered|24.11.5-1+deb13u1\n")
    h = read_host("ctl", ["client", "slurmctld"], text)
    assert (h.daemons, h.daemon, h.installed, h.offered, h.held) == (
        ("slurmctld", "client"), "slurmctld", V("22.05.8"), V("24.11.5"), False)
    assert [p for p, _v in h.packages] == ["slurm-client", "slurm-wlm-basic-plugins",
                                           "slurmctld"]
    fresh = read_host("gpu-003", ["slurmd"], "offered|(none)\n")
    assert (fresh.installed, fresh.offered, fresh.runs) == (None, None, None)
    assert release_problems([fresh]) == ([], [])


def test_an_upgraded_host_with_the_old_library_left_is_not_half_done():
    """apt full-upgrade installs libslurm42 beside libslurm38, which stays until autoremove."""
    text = (dpkg(TRIXIE, "slurmd", "slurm-client") + dpkg(BOOKWORM, "libslurm38")
            + dpkg(TRIXIE, "libslurm42") + f"offered|{TRIXIE}\n")
    h = read_host("gpu-001", ["slurmd"], text)
    assert (h.installed, [p for p, _v in h.packages]) == (V(TRIXIE), ["slurm-client", "slurmd"])
    assert release_problems(cluster(TRIXIE, **{"gpu-001": h})) == ([], [])


def test_held_packages_turn_the_refused_jump_into_a_note():
    """apt-mark hold keeps apt from making the jump; apt-cache still names the candidate."""
    text = (f"installed|hi |slurmd|slurm-wlm|{BOOKWORM}\n"
            f"installed|hi |slurm-client|slurm-wlm|{BOOKWORM}\n" f"offered|{TRIXIE}\n")
    held = read_host("gpu-001", ["slurmd"], text)
    assert held.held
    problems, notes = release_problems(cluster(**{"gpu-001": held}))
    assert problems == []
    assert notes == [
        "gpu-001: the apt sources offer Slurm 24.11.5 over the installed 22.05.8, a jump Slurm "
        "cannot make (Slurm 24.11 takes the state of 23.02, 23.11 and 24.05 only (3 releases "
        "back), so 22.05 to 24.11 skips 23.02, 23.11 and 24.05; upgrade through 23.11 then "
        "24.11); the packages are held (apt-mark hold), so apt leaves them: keep them held "
        "until you upgrade in steps (docs/how-to/day-2.md)"]


def test_controllers_on_different_releases_are_refused():
    """A primary and a backup slurmctld share the state directory: one release."""
    hosts = [host("ctl", ("slurmctld",), BOOKWORM, BOOKWORM),
             host("ctl2", ("slurmctld",), "23.02.7-1", "23.02.7-1")]
    assert release_problems(hosts)[0] == [
        "ctl, ctl2: the slurmctld hosts would run different Slurm releases (ctl 22.05.8, "
        "ctl2 23.02.7); they share slurmctld's state and run one release: upgrade them "
        "together"]


def test_a_controller_older_than_the_table_is_a_sentence_not_an_error():
    problems, _ = release_problems(cluster("19.05.5-1", **{
        "gpu-001": host("gpu-001", ("slurmd",), BOOKWORM, BOOKWORM)}))
    assert problems == [
        "gpu-001: slurmd runs Slurm 22.05.8, newer than slurmctld's 19.05.5 on ctl, which "
        "cannot read a newer release's messages: upgrade slurmdbd and slurmctld first, or "
        "point these hosts' apt sources at the release that ships 19.05"]
    problems, _ = release_problems(cluster("19.05.5-1", **{
        "gpu-001": host("gpu-001", ("slurmd",), "18.08.9-1", "18.08.9-1")}))
    assert problems == [
        "ctl: Slurm 19.05 is older than any release metalslurm knows (20.02, 20.11, 21.08, "
        "22.05, 23.02, 23.11, 24.05, 24.11, 25.05, 25.11, 26.05): upgrade it by hand to 20.02 "
        "or later first"]


def cluster(version: str = BOOKWORM, **changes: HostSlurm) -> list[HostSlurm]:
    hosts = {"ctl": host("ctl", ("slurmctld", "slurmdbd", "client"), version, version),
             "gpu-001": host("gpu-001", ("slurmd", "client"), version, version),
             "gpu-002": host("gpu-002", ("slurmd", "client"), version, version),
             "login-001": host("login-001", ("client",), version, version)}
    hosts.update(changes)
    return list(hosts.values())


def test_a_converged_cluster_passes():
    assert release_problems(cluster()) == ([], [])
    assert release_problems(cluster(TRIXIE)) == ([], [])


def test_sources_re_pointed_beyond_the_window_are_refused_once_for_all_their_hosts():
    problems, notes = release_problems(cluster(
        ctl=host("ctl", ("slurmctld", "slurmdbd"), BOOKWORM, TRIXIE),
        **{"gpu-001": host("gpu-001", ("slurmd",), BOOKWORM, TRIXIE)}))
    assert notes == []
    assert problems == [
        "ctl, gpu-001: the apt sources offer Slurm 24.11.5 over the installed 22.05.8, a jump "
        "Slurm cannot make: Slurm 24.11 takes the state of 23.02, 23.11 and 24.05 only "
        "(3 releases back), so 22.05 to 24.11 skips 23.02, 23.11 and 24.05; upgrade "
        "through 23.11 then 24.11. Point the apt sources back at the release that ships "
        "22.05, hold the Slurm packages (apt-mark hold), or upgrade in steps "
        "(docs/how-to/day-2.md): an 'apt upgrade' there would make that jump "
        "(unattended-upgrades leaves Slurm alone)"]


def test_sources_offering_a_release_inside_the_window_are_said_not_refused():
    problems, notes = release_problems(cluster(
        "23.11.4-1", **{"gpu-001": host("gpu-001", ("slurmd",), "23.11.4-1", TRIXIE)}))
    assert problems == []
    assert notes == ["gpu-001: the apt sources offer Slurm 24.11.5 over the installed 23.11.4; "
                     "this run keeps 23.11.4 (upgrade in SchedMD's order: docs/how-to/day-2.md)"]


def test_a_new_node_that_would_install_a_newer_slurmd_than_slurmctld_is_refused():
    """A node added from a newer image or with newer sources: its slurmd would speak a
    release slurmctld cannot read."""
    problems, _ = release_problems(cluster(**{
        "gpu-003": host("gpu-003", ("slurmd",), None, TRIXIE)}))
    assert problems == [
        "gpu-003: slurmd would install Slurm 24.11.5, newer than slurmctld's 22.05.8 on ctl, "
        "which cannot read a newer release's messages: upgrade slurmdbd and slurmctld "
        "first, or point these hosts' apt sources at the release that ships 22.05"]
    # A prepared image's node with 24.11 installed: the same, as "runs".
    problems, _ = release_problems(cluster(**{
        "gpu-003": host("gpu-003", ("slurmd",), TRIXIE, TRIXIE)}))
    assert problems[0].startswith("gpu-003: slurmd runs Slurm 24.11.5, newer than")


def test_older_nodes_inside_the_window_pass_and_beyond_it_are_refused():
    assert release_problems(cluster(TRIXIE, **{
        "gpu-001": host("gpu-001", ("slurmd",), "23.02.7-1", "23.02.7-1")})) == ([], [])
    problems, _ = release_problems(cluster(TRIXIE, **{
        "login-001": host("login-001", ("client",), BOOKWORM, BOOKWORM)}))
    assert problems == [
        "login-001: slurm-client runs Slurm 22.05.8, too old for slurmctld's 24.11.5 on "
        "ctl: Slurm 24.11 takes the state of 23.02, 23.11 and 24.05 only (3 releases back), "
        "so 22.05 to 24.11 skips 23.02, 23.11 and 24.05; upgrade through 23.11 then 24.11"]


def test_slurmdbd_older_than_slurmctld_is_refused():
    hosts = [host("ctl", ("slurmctld",), TRIXIE, TRIXIE),
             host("db", ("slurmdbd",), "24.05.4-1", "24.05.4-1")]
    assert release_problems(hosts)[0] == [
        "db: slurmdbd runs Slurm 24.05.4, older than slurmctld's 24.11.5 on ctl: slurmdbd is "
        "upgraded first and runs the newest release (SchedMD's order); upgrade slurmdbd's "
        "host, or point its apt sources at the release that ships 24.11"]
    newer = [host("ctl", ("slurmctld",), "24.05.4-1", "24.05.4-1"),
             host("db", ("slurmdbd",), TRIXIE, TRIXIE)]
    assert release_problems(newer) == ([], [])


def test_a_half_done_upgrade_is_refused():
    text = dpkg(TRIXIE, "slurmd") + dpkg(BOOKWORM, "slurm-client") + f"offered|{TRIXIE}\n"
    problems, _ = release_problems([host("ctl", ("slurmctld",), BOOKWORM, BOOKWORM),
                                    read_host("gpu-001", ["slurmd"], text)])
    assert problems[0] == (
        "gpu-001: Slurm's packages are at different releases (slurm-client 22.05.8-4+deb12u3, "
        "slurmd 24.11.5-1+deb13u1), a half-done upgrade: finish it with 'metalslurm configure "
        "--upgrade-slurm' (or by hand with apt in SchedMD's order: slurmdbd, slurmctld, then "
        "slurmd and the clients), or undo it, then run again")


def test_upgrade_finishes_a_half_done_upgrade_inside_the_window_only():
    """23.11 to 24.11 stopped half-way on a node is finished by --upgrade-slurm; 22.05 to
    24.11 half-way is a jump from the older package's release, refused."""
    for old, refused in (("23.11.4-1", False), (BOOKWORM, True)):
        text = (dpkg(TRIXIE, "slurmd") + dpkg(old, "slurm-client")
                + f"newer|slurm-client|{TRIXIE}\noffered|{TRIXIE}\n")
        node = read_host("gpu-001", ["slurmd"], text)
        problems, _ = release_problems([host("ctl", ("slurmctld",), TRIXIE, TRIXIE), node],
                                       upgrade=True)
        assert bool(problems) == refused, problems
        if refused:
            assert "skips 23.02, 23.11 and 24.05" in problems[0]
        else:
            assert upgrades([node]) == {"gpu-001": [f"slurm-client={TRIXIE}"]}


def test_many_hosts_are_counted_not_all_named():
    nodes = {f"gpu-{i:03d}": host(f"gpu-{i:03d}", ("slurmd",), None, TRIXIE)
             for i in range(1, 1001)}
    problems, _ = release_problems(cluster(**nodes))
    assert len(problems) == 1
    assert problems[0].startswith("gpu-001, gpu-002, gpu-003, gpu-004, gpu-005, gpu-006, "
                                  "gpu-007, gpu-008 and 992 more: slurmd would install")


def test_an_unknown_release_names_its_host():
    problems, _ = release_problems(cluster(**{
        "gpu-001": host("gpu-001", ("slurmd",), BOOKWORM, "27.05.1-1")}))
    assert problems[0].startswith("gpu-001: Slurm 27.05 is not a major release metalslurm knows")


# --upgrade-slurm: what the read step prints for each installed package whose candidate is a
# newer build ('newer|PACKAGE|VERSION', dpkg --compare-versions), and the check on the
# releases the hosts run afterwards.
STAND_IN = "24.11.5-1+deb13u1+standin1"


def offered_newer(name: str, daemons: tuple[str, ...], installed: str, newer: str,
                  *packages: str, held: bool = False) -> HostSlurm:
    status = "hi " if held else "ii "
    text = "".join(f"installed|{status}|{p}|slurm-wlm|{installed}\n" for p in packages)
    text += "".join(f"newer|{p}|{newer}\n" for p in packages) + f"offered|{newer}\n"
    return read_host(name, daemons, text)


def upgraded_cluster(installed: str, newer: str, **changes: HostSlurm) -> list[HostSlurm]:
    hosts = {
        "ctl": offered_newer("ctl", ("slurmctld", "slurmdbd"), installed, newer,
                             "slurm-client", "slurmctld", "slurmdbd"),
        "gpu-001": offered_newer("gpu-001", ("slurmd",), installed, newer, "slurm-client",
                                 "slurmd"),
        "login-001": offered_newer("login-001", ("client",), installed, newer, "slurm-client")}
    hosts.update(changes)
    return list(hosts.values())


def test_upgrade_names_every_package_to_install_and_says_the_order():
    hosts = upgraded_cluster(TRIXIE, STAND_IN)
    # Without --upgrade-slurm a newer build of the same release passes silently, as before.
    assert release_problems(hosts) == ([], [])
    problems, notes = release_problems(hosts, upgrade=True)
    assert problems == []
    assert notes == [
        f"ctl, gpu-001, login-001: the apt sources offer Slurm {STAND_IN} over the installed "
        f"{TRIXIE}; this run upgrades them, slurmdbd's host first, then slurmctld's, then the "
        "nodes and login nodes"]
    assert upgrades(hosts) == {
        "ctl": [f"slurm-client={STAND_IN}", f"slurmctld={STAND_IN}", f"slurmdbd={STAND_IN}"],
        "gpu-001": [f"slurm-client={STAND_IN}", f"slurmd={STAND_IN}"],
        "login-001": [f"slurm-client={STAND_IN}"]}


def test_upgrade_inside_the_window_judges_the_order_by_the_releases_after_it():
    """23.11 to 24.11 (inside 24.11's window) on every host passes; the same with slurmctld's
    sources still on 23.11 while a node's offer 24.11 is refused (slurmd would be newer)."""
    old = "23.11.4-1"
    problems, notes = release_problems(upgraded_cluster(old, TRIXIE), upgrade=True)
    assert problems == []
    # Before 24.11 a restarted slurmd refuses new steps of the jobs running across it.
    assert notes[1] == (
        "gpu-001: slurmd 23.11 restarted on the new build refuses new steps of the jobs "
        "running across the restart ('Job prolog failed'; their running steps finish): "
        "drain these nodes first where that matters")
    stuck = dict(ctl=host("ctl", ("slurmctld", "slurmdbd"), old, old))
    problems, _ = release_problems(upgraded_cluster(old, TRIXIE, **stuck), upgrade=True)
    assert problems == [
        "gpu-001: slurmd would upgrade to Slurm 24.11.5, newer than slurmctld's 23.11.4 on "
        "ctl, which cannot read a newer release's messages: upgrade slurmdbd and slurmctld "
        "first, or point these hosts' apt sources at the release that ships 23.11",
        "login-001: slurm-client would upgrade to Slurm 24.11.5, newer than slurmctld's "
        "23.11.4 on ctl, which cannot read a newer release's messages: upgrade slurmdbd and "
        "slurmctld first, or point these hosts' apt sources at the release that ships 23.11"]


def test_upgrade_beyond_the_window_is_refused_even_with_the_packages_held():
    """Debian 12's 22.05 with Debian 13's sources: --upgrade-slurm refuses the jump (held or
    not); held packages inside the window are refused too, as apt would not touch them."""
    problems, _ = release_problems(upgraded_cluster(BOOKWORM, TRIXIE), upgrade=True)
    assert problems[0] == (
        f"ctl, gpu-001, login-001: the apt sources offer Slurm {TRIXIE} over the installed "
        f"{BOOKWORM}, a jump Slurm cannot make: Slurm 24.11 takes the state of 23.02, 23.11 "
        "and 24.05 only (3 releases back), so 22.05 to 24.11 skips 23.02, 23.11 and 24.05; "
        "upgrade through 23.11 then 24.11. Point the apt sources at a release inside 22.05's "
        "window first, or run without --upgrade-slurm (docs/how-to/day-2.md)")
    held = offered_newer("gpu-001", ("slurmd",), TRIXIE, STAND_IN, "slurmd", held=True)
    problems, _ = release_problems(upgraded_cluster(TRIXIE, STAND_IN, **{"gpu-001": held}),
                                   upgrade=True)
    assert problems == [
        f"gpu-001: the apt sources offer Slurm {STAND_IN} over the installed {TRIXIE}, and "
        "Slurm's packages are held (apt-mark hold), so --upgrade-slurm cannot install them: "
        "'apt-mark unhold' them there, or run without --upgrade-slurm"]


def test_a_newer_line_that_cannot_be_read_is_refused_and_a_fresh_host_upgrades_nothing():
    with pytest.raises(SlurmVersionError, match="cannot read a Slurm version"):
        read_host("gpu-001", ["slurmd"], dpkg(TRIXIE, "slurmd") + "newer|slurmd|garbage\n")
    fresh = read_host("gpu-003", ["slurmd"], "newer|slurmd|24.11.5-1\noffered|24.11.5-1\n")
    assert (fresh.newer, upgrades([fresh])) == ((), {})
