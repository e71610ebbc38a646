"""``metalslurm maintain --update`` (infra/ops/maintain.py, infra/ops/node_update.py) against
the stand-in slurmctld of test_maintain.py and stand-in nodes whose apt sources offer newer
builds: every node checked before any is drained, a busy node updated only once its jobs
end, the way back through munge's and slurmd's restart (or the reboot) and the health check,
a failure left drained for the next run."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from infra import cli
from infra.ops import maintain as m
from infra.ops import node_update as u
from tests.unit.maintain_standins import FakeNode, FakeSlurm, changes, write_inventory

DRAIN_RE = re.compile(r'^now=\$\(date \+%s\) && scontrol update nodename=(\S+) state=drain '
                      r'reason="metalslurm-maintain: update requested at \$now" '
                      r'&& echo "\$now"$')
HEALTH = "/usr/local/sbin/metalslurm-health"
MUNGE = ("newer|munge|munge|0.5.16-1|0.5.16-1+s1|no|no\n"
         "newer|libmunge2|munge|0.5.16-1|0.5.16-1+s1|no|no\n")


class UpdateSlurm(FakeSlurm):
    """test_maintain's slurmctld, with the drain --update asks for and slurmctld's build."""

    controller_slurm = "24.11.5-4+deb13u1"

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> SimpleNamespace:
        drain = DRAIN_RE.match(command)
        if drain:
            self.commands.append(command)
            now = int(self.clock())
            node = self.nodes[drain[1]]
            node.states.add("DRAIN")
            node.reason = f"metalslurm-maintain: update requested at {now}"
            return SimpleNamespace(returncode=0, stdout=f"{now}\n", stderr="")
        if command == u.CONTROLLER_SLURM:
            self.commands.append(command)
            return SimpleNamespace(returncode=0, stdout=self.controller_slurm, stderr="")
        return super().run(command, check, timeout, stdin)


@dataclass
class Nodes:
    """The nodes' side: each one's plan lines (emptied once installed), the scripts run."""

    slurm: UpdateSlurm
    plans: dict[str, str]
    ran: list[tuple[str, str]] = field(default_factory=list)
    apply_fails: set[str] = field(default_factory=set)
    during: dict[str, object] = field(default_factory=dict)  # a step: what happens meanwhile
    unreachable: set[str] = field(default_factory=set)  # ssh fails (rebooting)

    def __call__(self, name: str) -> Nodes:
        self.current = name
        return self

    def run(self, command: str, check: bool = True, timeout: float = 120,
            stdin: str | None = None) -> SimpleNamespace:
        name = self.current
        node = self.slurm.nodes[name]
        what = {u.PLAN_SCRIPT: "plan", u.APPLY_SCRIPT: "apply", u.RESTART_SCRIPT: "restart",
                None: command}[stdin]
        self.ran.append((name, f"{what} {command}" if what == "apply" else what))
        if what in self.during:
            self.during.pop(what)(node)  # type: ignore[operator]
        if what == "plan" and name not in self.unreachable:
            assert command == f"bash -s -- {shlex.quote(self.slurm.controller_slurm)}"
            return SimpleNamespace(returncode=0, stdout="Reading package lists...\n"
                                   + self.plans.get(name, ""), stderr="")
        # Nothing is installed or restarted on a node that runs jobs, or is not drained.
        if what in ("apply", "restart"):
            assert node.states & {"ALLOCATED", "MIXED"} == set() and "DRAIN" in node.states
        if what == "plan" and name in self.unreachable:
            return SimpleNamespace(returncode=255, stdout="", stderr="ssh: connect: refused")
        if what == "apply":
            if name in self.apply_fails:
                return SimpleNamespace(returncode=100, stdout="", stderr=(
                    "E: Could not get lock /var/lib/dpkg/lock-frontend"))
            self.plans[name] = ""
        if what == HEALTH:
            return SimpleNamespace(returncode=0, stdout="ok\n", stderr="")
        return SimpleNamespace(returncode=0, stdout="", stderr="")


def updater(slurm: UpdateSlurm, nodes: Nodes, *, reboot: bool = False, batch: int = 1,
            max_wait: float | None = None, pins: dict[str, str] | None = None
            ) -> tuple[m.Maintain, list[str]]:
    lines: list[str] = []
    settings = m.Settings(batch, HEALTH, False, max_wait=max_wait, reboot=reboot, update=True,
                          pins=pins or {})
    return m.Maintain(slurm, nodes, settings, log=lines.append, poll=0, clock=slurm.clock,
                      monotonic=lambda: float(slurm.tick), sleep=slurm.sleep), lines


def drains(slurm: FakeSlurm) -> list[str]:
    return [f"drain {DRAIN_RE.match(c)[1]}" if DRAIN_RE.match(c) else c
            for c in changes(slurm) if c != u.CONTROLLER_SLURM]


def test_each_node_is_updated_once_its_jobs_end_and_returns_through_its_restart():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=9),
                         "gpu-002": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-001": MUNGE, "gpu-002": MUNGE})
    run, lines = updater(slurm, nodes)
    result = run.run(["gpu-001", "gpu-002"])
    assert drains(slurm) == ["drain gpu-002", "scontrol update nodename=gpu-002 state=resume",
                             "drain gpu-001", "scontrol update nodename=gpu-001 state=resume"]
    words = "apply bash -s -- munge=0.5.16-1+s1 libmunge2=0.5.16-1+s1"
    # Both checked before either was drained; each checked again right before its install.
    assert nodes.ran == [("gpu-001", "plan"), ("gpu-002", "plan"),
                         ("gpu-002", "plan"), ("gpu-002", words), ("gpu-002", "restart"),
                         ("gpu-002", HEALTH),
                         ("gpu-001", "plan"), ("gpu-001", words), ("gpu-001", "restart"),
                         ("gpu-001", HEALTH)]
    assert [(p.node, p.ok, p.outcome) for p in result.done] == [
        ("gpu-002", True, "back in service"), ("gpu-001", True, "back in service")]
    assert [n.states for n in slurm.nodes.values()] == [{"IDLE"}, {"IDLE"}]
    assert "gpu-001: waiting for its jobs to end (drained, update pending)" in lines
    assert ("gpu-002: installed munge 0.5.16-1 -> 0.5.16-1+s1; libmunge2 0.5.16-1 -> "
            "0.5.16-1+s1") in lines
    assert "gpu-001: drained for its update (it waits for its jobs to end; it takes no new one)" \
        in lines
    # slurmd was restarted, not the node rebooted.
    assert all(n.boot == 1000 for n in slurm.nodes.values())


def test_a_node_with_nothing_newer_is_never_drained():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"}), "gpu-002": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-002": MUNGE})
    run, lines = updater(slurm, nodes)
    result = run.run(["gpu-001", "gpu-002"])
    assert result.skipped == {"gpu-001": "nothing newer to install: left in service"}
    assert all("gpu-001" not in c for c in drains(slurm))
    assert [p.node for p in result.done if p.ok] == ["gpu-002"]
    assert "gpu-001: nothing newer to install" in lines


@pytest.mark.parametrize("plan, pins, said", [
    ("newer|slurmd|slurm-wlm|24.11.5-4|26.05.5-1|no|yes\n", {},
     "gpu-001: slurmd 24.11.5-4 -> 26.05.5-1 would be newer than slurmctld's "
     "24.11.5-4+deb13u1: upgrade the controller first"),
    ("newer|nvidia-kernel-open-dkms|nvidia-graphics-drivers|580.95.05-1|580.105.08-1|yes|no\n",
     {}, "gpu-001: nvidia-kernel-open-dkms 580.95.05-1 -> 580.105.08-1 takes effect only at "
     "boot: give --reboot as well"),
    ("installed|datacenter-gpu-manager-4-cuda13|1:4.2.3-1\n"
     "installed|datacenter-gpu-manager-exporter|1:4.1.1-4.0.4\n"
     "newer|datacenter-gpu-manager-4-cuda13|dcgm|1:4.2.3-1|1:4.4.1-1|yes|no\n", {},
     "gpu-001: only DCGM would move, and DCGM and its exporter move together: have the apt "
     "sources offer both, or pin both"),
    ("installed|datacenter-gpu-manager-4-cuda13|1:4.2.3-1\n"
     "installed|datacenter-gpu-manager-exporter|1:4.1.1-4.0.4\n"
     "newer|datacenter-gpu-manager-4-cuda13|dcgm|1:4.2.3-1|1:4.4.1-1|yes|no\n"
     "newer|datacenter-gpu-manager-exporter|dcgm-exporter|1:4.1.1-4.0.4|1:4.4.1-4.5.0|yes|no\n",
     {"datacenter-gpu-manager-4-": "metalslurm_gpu.dcgm_version"},
     "gpu-001: only the DCGM exporter would move"),
])
def test_what_cannot_be_installed_is_refused_for_every_node_before_any_is_drained(
        plan, pins, said):
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"}), "gpu-002": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-001": plan, "gpu-002": plan.replace("gpu-001", "gpu-002")})
    run, _lines = updater(slurm, nodes, pins=pins)
    with pytest.raises(m.MaintainError) as refused:
        run.run(["gpu-001", "gpu-002"])
    message = str(refused.value)
    assert message.startswith("refused, and nothing changed by this run: ") and said in message
    assert said.replace("gpu-001", "gpu-002") in message
    assert drains(slurm) == [] and [w for _n, w in nodes.ran] == ["plan", "plan"]


def test_slurm_packages_are_refused_where_the_controllers_build_cannot_be_read():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"})})
    slurm.controller_slurm = ""
    nodes = Nodes(slurm, {"gpu-001": "newer|slurmd|slurm-wlm|24.11.5-4|24.11.5-5|no|no\n"})
    run, _lines = updater(slurm, nodes)
    with pytest.raises(m.MaintainError, match="newer than slurmctld's build, which dpkg on "
                       "the controller does not know"):
        run.run(["gpu-001"])


def test_packages_the_inventory_pins_are_kept_and_named_not_refused():
    """A pinned DCGM is left where the pin has it (the next configure would put it back),
    whatever the sources offer; the rest of the node's updates go ahead."""
    plan = u.parse_plan("newer|datacenter-gpu-manager-exporter|dcgm-exporter|4.1-1|4.2-1|yes|no\n"
                        "newer|datacenter-gpu-manager-4-cuda13|dcgm|1:4.2-1|1:4.4-1|yes|no\n"
                        + MUNGE)
    pins = u.pinned_packages({"metalslurm_gpu": {"dcgm_version": "1:4.2-1",
                                                 "dcgm_exporter_version": "4.1-1"}})
    assert pins == {"datacenter-gpu-manager-4-": "metalslurm_gpu.dcgm_version",
                    "datacenter-gpu-manager-exporter": "metalslurm_gpu.dcgm_exporter_version"}
    kept = u.without_pinned(plan, pins)
    assert [n.package for n in kept.newer] == ["munge", "libmunge2"]
    assert kept.kept == (
        "datacenter-gpu-manager-exporter kept at 4.1-1, which "
        "metalslurm_gpu.dcgm_exporter_version pins (4.2-1 offered)",
        "datacenter-gpu-manager-4-cuda13 kept at 1:4.2-1, which metalslurm_gpu.dcgm_version "
        "pins (1:4.4-1 offered)")
    assert u.plan_problems("n", kept, reboot=False, controller_slurm="1") == []
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-001": "installed|datacenter-gpu-manager-4-cuda13|1:4.2-1\n"
                                     "newer|datacenter-gpu-manager-4-cuda13|dcgm|1:4.2-1|"
                                     "1:4.4-1|yes|no\n"})
    run, lines = updater(slurm, nodes, pins=pins)
    assert run.run(["gpu-001"]).skipped == {
        "gpu-001": "nothing newer to install: left in service"}
    assert lines[:2] == ["gpu-001: datacenter-gpu-manager-4-cuda13 kept at 1:4.2-1, which "
                         "metalslurm_gpu.dcgm_version pins (1:4.4-1 offered)",
                         "gpu-001: nothing newer to install"]


def test_with_reboot_the_packages_go_in_first_and_the_node_boots_onto_them():
    driver = "newer|nvidia-kernel-open-dkms|nvidia-graphics-drivers|580.95-1|580.105-1|yes|no\n"
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-001": driver})
    run, lines = updater(slurm, nodes, reboot=True)
    result = run.run(["gpu-001"])
    assert drains(slurm) == ["drain gpu-001", "reboot gpu-001",
                             "scontrol update nodename=gpu-001 state=resume"]
    assert [w for _n, w in nodes.ran] == [
        "plan", "plan", "apply bash -s -- nvidia-kernel-open-dkms=580.105-1", HEALTH]
    assert slurm.nodes["gpu-001"].boot > 2000 and result.done[0].ok
    assert "gpu-001: reboot requested" in lines


def test_with_reboot_a_node_with_nothing_newer_is_still_rebooted():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {})
    run, _lines = updater(slurm, nodes, reboot=True)
    assert run.run(["gpu-001"]).done[0].ok
    assert drains(slurm)[:2] == ["drain gpu-001", "reboot gpu-001"]


def test_a_failed_install_stays_drained_and_the_next_run_takes_it_up():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-001": MUNGE}, apply_fails={"gpu-001"})
    run, lines = updater(slurm, nodes)
    result = run.run(["gpu-001"])
    assert result.failed[0].outcome == (
        "not updated: apt-get install failed (exit status 100: E: Could not get lock "
        "/var/lib/dpkg/lock-frontend); it stays drained (this command's reason): fix that and "
        "run the same command again")
    node = slurm.nodes["gpu-001"]
    assert node.states == {"IDLE", "DRAIN"} and node.reason.startswith(
        "metalslurm-maintain: update requested at ")
    # Fixed; the same command again takes the drained node up without draining it again.
    nodes.apply_fails.clear()
    run, lines = updater(slurm, nodes)
    result = run.run(["gpu-001"])
    assert result.done[0].ok and node.states == {"IDLE"}
    assert sum(1 for c in drains(slurm) if c == "drain gpu-001") == 1
    assert lines[1].startswith("gpu-001: drained for its update by an earlier run")


def test_a_node_drained_for_an_update_is_taken_up_even_with_nothing_left_to_install():
    """An earlier run installed the packages and stopped before the restart: the restart,
    the check and the return still happen."""
    slurm = UpdateSlurm({"gpu-001": FakeNode(
        {"IDLE", "DRAIN"}, reason="metalslurm-maintain: update requested at 1900")})
    nodes = Nodes(slurm, {})
    run, _lines = updater(slurm, nodes)
    result = run.run(["gpu-001"])
    assert [w for _n, w in nodes.ran] == ["plan", "plan", "restart", HEALTH]
    assert result.done[0].ok and slurm.nodes["gpu-001"].states == {"IDLE"}


def test_a_rolling_reboot_leaves_a_node_drained_for_an_update_alone():
    slurm = UpdateSlurm({"gpu-001": FakeNode(
        {"IDLE", "DRAIN"}, reason="metalslurm-maintain: update requested at 1900")})
    run = m.Maintain(slurm, Nodes(slurm, {}), m.Settings(1, HEALTH, False), log=lambda _l: None,
                     poll=0, clock=slurm.clock, monotonic=lambda: float(slurm.tick),
                     sleep=slurm.sleep)
    assert run.run(["gpu-001"]).skipped["gpu-001"].startswith("drained (DRAIN+IDLE, "
                                                              "metalslurm-maintain: update")


def test_jobs_past_max_wait_lift_the_drain_and_nothing_is_installed():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=50)})
    nodes = Nodes(slurm, {"gpu-001": MUNGE})
    run, _lines = updater(slurm, nodes, max_wait=3)
    result = run.run(["gpu-001"])
    assert result.called_off[0].outcome == (
        "NOT updated: job 17 (alice, 1:02:03 left) still ran after --max-wait 3 s; its drain "
        "was lifted and it is back in service")
    assert slurm.nodes["gpu-001"].states == {"ALLOCATED"}
    assert [w for _n, w in nodes.ran] == ["plan"]


def test_a_node_resumed_by_someone_else_while_it_waited_is_not_updated():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"ALLOCATED"}, job_ends=5)})
    nodes = Nodes(slurm, {"gpu-001": MUNGE})
    original = slurm.sleep

    def sleep(seconds: float) -> None:
        original(seconds)
        if slurm.tick == 2:
            slurm.nodes["gpu-001"].states.discard("DRAIN")
            slurm.nodes["gpu-001"].reason = ""

    slurm.sleep = sleep  # type: ignore[method-assign]
    run, _lines = updater(slurm, nodes)
    result = run.run(["gpu-001"])
    assert result.failed[0].outcome.startswith("its drain was lifted or replaced by someone "
                                               "else (ALLOCATED, no reason); not updated")
    assert [w for _n, w in nodes.ran] == ["plan"]


def test_the_plans_lines_are_read_and_apts_chatter_ignored():
    plan = u.parse_plan("W: some warning\n" + MUNGE + "installed|munge|0.5.16-1\n"
                        + "newer|slurmd|slurm-wlm|24.11.5-4|24.11.5-4+s1|yes|no\n"
                        + "broken|The following packages are only half configured: munge\n")
    assert plan.installed == {"munge": "0.5.16-1"} and plan.work
    assert plan.broken == "The following packages are only half configured: munge"
    assert [(n.package, n.held, n.slurm, n.needs_reboot) for n in plan.newer] == [
        ("munge", False, False, False), ("libmunge2", False, False, False),
        ("slurmd", True, True, False)]
    assert u.install_words(plan)[0] == "munge=0.5.16-1+s1"


@pytest.mark.parametrize("package, reboot", [
    ("nvidia-kernel-open-dkms", True), ("nvidia-driver-cuda", True), ("libnvidia-compute", True),
    ("nvidia-dkms-570-open", True), ("libnvidia-compute-570", True), ("linux-image-amd64", True),
    ("nvidia-fabricmanager", True), ("nvidia-container-toolkit", False),
    ("libnvidia-container-tools", False), ("datacenter-gpu-manager-4-cuda13", False),
    ("munge", False), ("slurmd", False)])
def test_packages_that_load_at_boot_need_a_reboot(package, reboot):
    assert u.Newer(package, "", "1", "2", False, False).needs_reboot is reboot


def test_the_plan_script_reads_the_packages_kept_from_upgrades_against_fake_apt(tmp_path):
    """The node's plan script with stand-ins for apt-get, apt-config, dpkg-query and
    apt-cache and the real dpkg --compare-versions: held packages, munge's and Slurm's, and
    those unattended-upgrades leaves alone, newer only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text("#!/bin/sh\nexit 0\n")
    # The roles' unattended-upgrades patterns as apt-config prints them; 'xnvidia' has no
    # caret, and is matched at the start of a name all the same, as unattended-upgrades does.
    (bin_dir / "apt-config").write_text(
        "#!/bin/sh\nprintf '%s\\n' 'Unattended-Upgrade::Package-Blacklist \"\";' "
        "'Unattended-Upgrade::Package-Blacklist:: \"^libpmix\";' "
        "'Unattended-Upgrade::Package-Blacklist:: \"xnvidia\";'\n")
    (bin_dir / "dpkg-query").write_text(
        "#!/bin/sh\nprintf '%s\\n' 'ii |munge|munge|0.5.16-1' 'ii |libmunge2|munge|0.5.16-1' "
        "'hi |nvidia-driver-cuda|nvidia-graphics-drivers|580.95-1' "
        "'ii |slurmd|slurm-wlm|24.11.5-4' 'ii |bash|bash|5.2-1' "
        "'ii |libpmix2t64|pmix|5.0.7-1' 'ii |axnvidia|y|1' 'ii |xnvidia-smi|y|1' "
        "'hi |libfoo:amd64|foo|1' 'hi |libfoo:i386|foo|1' "
        "'rc |gone|gone|1' 'hi |held-same|x|1.0'\n")
    (bin_dir / "apt-cache").write_text(
        "#!/bin/sh\ncase $2 in munge) c=0.5.16-1+s1;; libmunge2) c=0.5.16-1;; "
        "nvidia-driver-cuda) c=580.105-1;; slurmd) c=26.05.5-1;; bash) c=5.3-1;; "
        "libpmix2t64) c=5.0.7-2;; axnvidia|xnvidia-smi|libfoo|libfoo:i386) c=2;; "
        "*) c='(none)';; esac\nprintf 'x:\\n  Installed: 1\\n  Candidate: %s\\n' \"$c\"\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    proc = subprocess.run(["bash", "-s", "--", "24.11.5-4+deb13u1"], input=u.PLAN_SCRIPT,
                          capture_output=True, text=True, check=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    plan = u.parse_plan(proc.stdout)
    assert plan.installed == {
        "munge": "0.5.16-1", "libmunge2": "0.5.16-1", "nvidia-driver-cuda": "580.95-1",
        "slurmd": "24.11.5-4", "libpmix2t64": "5.0.7-1", "xnvidia-smi": "1",
        "libfoo": "1", "libfoo:i386": "1", "held-same": "1.0"}
    assert [line for line in proc.stdout.splitlines() if line.startswith("newer|")] == [
        "newer|munge|munge|0.5.16-1|0.5.16-1+s1|no|no",
        "newer|nvidia-driver-cuda|nvidia-graphics-drivers|580.95-1|580.105-1|yes|no",
        "newer|slurmd|slurm-wlm|24.11.5-4|26.05.5-1|no|yes",
        "newer|libpmix2t64|pmix|5.0.7-1|5.0.7-2|no|no",
        "newer|xnvidia-smi|y|1|2|no|no",
        "newer|libfoo|foo|1|2|yes|no",
        "newer|libfoo:i386|foo|1|2|yes|no"]


def test_the_command_line_takes_update_without_reboot(tmp_path, monkeypatch):
    seen = {}

    def fake(inventory, **kwargs):
        seen.update(kwargs)
        return 0

    monkeypatch.setattr("infra.ops.maintain.run_maintain", fake)
    inventory = write_inventory(tmp_path)
    assert cli.main(["maintain", "-i", str(inventory), "--nodes", "gpu-001", "--update"]) == 0
    assert (seen["update"], seen["reboot"]) == (True, False)


def test_neither_reboot_nor_update_is_one_line_and_exit_2(tmp_path, capsys):
    inventory = write_inventory(tmp_path)
    assert cli.main(["maintain", "-i", str(inventory), "--nodes", "gpu-001"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: --reboot/--update: one is required: give --reboot (rolling "
                   "reboots), --update (package updates) or both\n")


@pytest.mark.parametrize("step", ["apply", HEALTH])
def test_a_drain_someone_else_set_while_the_node_was_updated_is_kept(step):
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-001": MUNGE})

    def operator_drains(node: FakeNode) -> None:
        node.reason = "bad GPU 3, do not resume"

    nodes.during[step] = operator_drains
    run, _lines = updater(slurm, nodes)
    result = run.run(["gpu-001"])
    assert result.failed[0].outcome == (
        "drained, resumed or removed by someone else while it was updated (DRAIN+IDLE, bad GPU "
        "3, do not resume); its packages are installed, the node is left as it is")
    node = slurm.nodes["gpu-001"]
    assert (node.states, node.reason) == ({"IDLE", "DRAIN"}, "bad GPU 3, do not resume")
    assert not any("state=resume" in c for c in drains(slurm))


def test_a_half_done_install_is_finished_even_with_nothing_newer():
    slurm = UpdateSlurm({"gpu-001": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-001": "broken|The following packages are only half configured,"
                                     " probably due to problems configuring them: munge\n"})
    run, lines = updater(slurm, nodes)
    result = run.run(["gpu-001"])
    assert [w for _n, w in nodes.ran] == ["plan", "plan", "apply bash -s -- ", "restart", HEALTH]
    assert result.done[0].ok
    assert ("gpu-001: dpkg reports a half-done install, finished first: The following packages "
            "are only half configured, probably due to problems configuring them: munge") in lines
    assert "gpu-001: nothing newer to install; dpkg's half-done install finished" in lines


def test_a_node_rebooting_for_an_earlier_run_is_not_read_and_is_said_not_updated():
    """Its reboot was asked for by a --reboot run and it is down: its packages are not read
    (ssh would fail), the run goes on with its reboot, and says it was not updated."""
    slurm = UpdateSlurm({
        "gpu-001": FakeNode({"DOWN", "DRAIN", "REBOOT_ISSUED"},
                            reason="metalslurm-maintain: reboot requested at 1900 : reboot "
                                   "issued"),
        "gpu-002": FakeNode({"IDLE"})})
    nodes = Nodes(slurm, {"gpu-002": MUNGE}, unreachable={"gpu-001"})
    run, lines = updater(slurm, nodes)
    result = run.run(["gpu-001", "gpu-002"])
    assert [p.node for p in result.done if p.ok] == ["gpu-001", "gpu-002"]
    assert ("gpu-001: its reboot was asked for by an earlier run (down+drain+reboot_issued): "
            "taken up; that run did not update it: run --update again after this one") in lines
    assert ("gpu-001", "plan") not in nodes.ran


def test_a_node_an_earlier_run_drained_for_its_update_counts_in_the_batch_first():
    slurm = UpdateSlurm({
        "gpu-001": FakeNode({"IDLE"}),
        "gpu-002": FakeNode({"ALLOCATED", "DRAIN"}, job_ends=5,
                            reason="metalslurm-maintain: update requested at 1900")})
    nodes = Nodes(slurm, {"gpu-001": MUNGE, "gpu-002": MUNGE})
    run, _lines = updater(slurm, nodes, batch=1)
    run.run(["gpu-001", "gpu-002"])
    # gpu-002 went first (it was out already); gpu-001 was drained only once it was back.
    assert drains(slurm) == ["scontrol update nodename=gpu-002 state=resume", "drain gpu-001",
                             "scontrol update nodename=gpu-001 state=resume"]


@pytest.mark.parametrize("apt_get_rc, audit, said", [
    (100, "", "E: held broken packages"),
    (0, "munge half configured", "dpkg --audit still reports a half-done install: munge half "
     "configured"),
])
def test_the_apply_script_puts_holds_back_whatever_happens(tmp_path, apt_get_rc, audit, said):
    """The node's apply script with stand-ins for dpkg, apt-get and apt-mark: a failed
    install and a half-done one both exit non-zero, and the holds and auto marks are put
    back either way; nothing is removed (--no-remove)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    (bin_dir / "dpkg").write_text(f'#!/bin/sh\necho "dpkg $*" >> {log}\n'
                                  f'[ "$1" = --audit ] && printf %s "{audit}"; exit 0\n')
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >> {log}\n'
                                     f'[ {apt_get_rc} = 0 ] || echo "{said}" >&2\n'
                                     f'exit {apt_get_rc}\n')
    (bin_dir / "apt-mark").write_text(
        f'#!/bin/sh\necho "apt-mark $*" >> {log}\n'
        'case $1 in showhold) echo munge;; showauto) echo libmunge2;; esac\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    proc = subprocess.run(["bash", "-s", "--", "munge=2", "libmunge2=2"], input=u.APPLY_SCRIPT,
                          capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert proc.returncode != 0 and said in proc.stderr
    assert log.read_text().splitlines()[:2] == [
        "dpkg --force-confdef --force-confold --configure -a", "apt-mark showhold"]
    calls = log.read_text().splitlines()
    install = next(c for c in calls if c.startswith("apt-get install"))
    assert "--no-remove" in install and install.endswith("munge=2 libmunge2=2")
    assert calls[-2:] == ["apt-mark hold munge", "apt-mark auto libmunge2"]
