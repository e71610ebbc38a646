"""The configure-scale bench's pure parts (bench/bench_configure_scale.py): the stack file it
writes per size, the line fit and its extrapolation, the memory forecast, and the readers of
ansible-playbook's recaps (a recording, tests/fixtures/ansible/README.md) and of cgroup
files. The bench itself brings up real clusters and runs by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import bench_configure_scale as bench
from infra.stack.config import load_stack_file

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests/fixtures/ansible/site-cold-profile-recap.txt"


# ---- the stack files ---------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 32, 150])
def test_stack_file_is_a_valid_stack_of_n_static_nodes(tmp_path, n):
    cfg = load_stack_file(bench.write_stack(tmp_path, n), check_artifacts=False)
    assert (cfg.cluster_name, str(cfg.private_cidr)) == (f"ms-cfg-{n}", f"10.78.{100 + n}.0/24")
    assert [(p.name, p.count, p.elastic_count, p.gpu_type, p.gpu_count)
            for p in cfg.compute_pools] == [("gpu", n, 0, "h100", 8)]
    assert (cfg.provider, cfg.os, cfg.storage.backend, cfg.login.count) == (
        "local", "debian13", "none", 0)


def test_stack_file_keeps_the_base_pins_and_makes_the_mirror_absolute(tmp_path):
    base = yaml.safe_load(bench.BASE_STACK.read_text())["config"]["metalslurm:containers"]
    path = bench.write_stack(tmp_path, 8)
    written = yaml.safe_load(path.read_text())["config"]["metalslurm:containers"]
    assert path.name == "Pulumi.ms-cfg-8.yaml"
    assert written["artifacts"] == base["artifacts"]
    assert written["mirror"] == str((bench.BASE_STACK.parent / base["mirror"]).resolve())


def test_stack_config_drops_what_names_the_base_nodes():
    base = {"config": {"metalslurm:clusterName": "x", "metalslurm:login": {"count": 1},
                       "metalslurm:topology": {"leaves": []},
                       "metalslurm:containers": {"mirror": "https://example.invalid/m"}}}
    config = bench.stack_config(base, Path("/nowhere"), 4)["config"]
    assert "metalslurm:login" not in config and "metalslurm:topology" not in config
    assert config["metalslurm:containers"] == {"mirror": "https://example.invalid/m"}


@pytest.mark.parametrize("bare", [False, True])
def test_the_nodes_start_from_the_prepared_images_unless_bare(tmp_path, bare):
    cfg = load_stack_file(bench.write_stack(tmp_path, 2, bare=bare), check_artifacts=False)
    assert cfg.local.prepared_images is (not bare)


def test_a_base_stacks_own_prepared_images_setting_is_the_benchs_to_make():
    base = {"config": {"metalslurm:local": {"preparedImages": False, "elasticMode": "x"}}}
    assert bench.stack_config(base, Path("/nowhere"), 2)["config"]["metalslurm:local"] == {
        "elasticMode": "x"}
    assert bench.stack_config(base, Path("/nowhere"), 2, bare=True)["config"][
        "metalslurm:local"] == {"elasticMode": "x", "preparedImages": False}
    base = {"config": {"metalslurm:local": {"preparedImages": True}}}
    assert "metalslurm:local" not in bench.stack_config(base, Path("/nowhere"), 2)["config"]


@pytest.mark.parametrize("n", [0, 151])
def test_a_size_outside_the_networks_is_refused(n):
    with pytest.raises(ValueError, match="1 to 150"):
        bench.private_cidr(n)


def test_sizes_are_read_sorted_and_once():
    assert bench.parse_sizes("32,2, 8,16,8") == [2, 8, 16, 32]


@pytest.mark.parametrize("text", ["", "0,2", "2,500"])
def test_sizes_out_of_range_are_refused(text):
    with pytest.raises(ValueError, match="node counts from 1 to 150"):
        bench.parse_sizes(text)


# ---- the recaps -------------------------------------------------------------------------

def test_recap_sections_are_the_three_banners():
    sections = bench.recap_sections(RECORDING.read_text())
    assert list(sections) == ["PLAY RECAP", "ROLES RECAP", "TASKS RECAP"]


def test_play_recap_per_host():
    recap = bench.parse_recap(RECORDING.read_text())
    assert recap["ctl"] == {"ok": 170, "changed": 82, "unreachable": 0, "failed": 0,
                            "skipped": 73}
    assert sorted(recap) == ["ctl", "gpu-001", "gpu-002", "localhost"]
    assert sum(h["changed"] for h in recap.values()) == 200


def test_steps_per_compute_node_leave_out_the_controller_and_localhost():
    recap = bench.parse_recap(RECORDING.read_text())
    assert bench.steps_per_compute_node(recap) == (117 + 40 + 110 + 34) / 2


def test_roles_recap_read_without_its_total():
    roles = bench.parse_profile(bench.recap_sections(RECORDING.read_text())["ROLES RECAP"])
    assert roles["enroot_pyxis"] == 38.12 and roles["gather_facts"] == 1.88
    assert roles["ansible.builtin.include_role"] == 0.12  # a task outside a role: its action
    assert "total" not in roles
    assert sum(roles.values()) == pytest.approx(124.91, abs=0.05)


def test_tasks_recap_sums_a_task_run_in_two_plays():
    tasks = bench.parse_profile(bench.recap_sections(RECORDING.read_text())["TASKS RECAP"])
    name = ("enroot_pyxis : Install Enroot, then its capabilities add-on (dependencies come "
            "from the distribution)")
    assert tasks[name] == pytest.approx(8.29 + 7.34)
    assert tasks["mpi : Install PMIx (and OpenMPI where jobs run)"] == 9.68


def test_a_task_name_longer_than_the_line_is_read_whole():
    tasks = bench.parse_profile(bench.recap_sections(RECORDING.read_text())["TASKS RECAP"])
    assert tasks["slurm_controller : Apply configuration changes (restart or reconfigure) "
                 "before starting"] == 0.0


def test_timestamp_and_rule_lines_are_not_timings():
    assert bench.parse_profile([
        "Friday 27 November 2026  22:06:59 +0000 (0:02:05.329)       0:02:05.329 *******",
        "=" * 79, "~" * 79, ""]) == {}


# ---- fits and the model ------------------------------------------------------------------

def test_fit_recovers_a_line_and_extrapolates():
    line = bench.fit_line([2, 8, 16, 32], [30 + 2.5 * n for n in (2, 8, 16, 32)])
    assert (line.intercept, line.slope, line.r2) == pytest.approx((30.0, 2.5, 1.0))
    assert line.at(1000) == pytest.approx(2530.0)


def test_fit_of_scattered_points_is_least_squares():
    line = bench.fit_line([0, 1, 2, 3], [1, 3, 2, 4])
    assert (line.intercept, line.slope) == pytest.approx((1.3, 0.8))
    assert line.r2 == pytest.approx(0.64)


@pytest.mark.parametrize(("xs", "ys"), [([2], [10]), ([2, 2], [10, 12]), ([2, 8], [10])])
def test_fit_needs_two_sizes(xs, ys):
    with pytest.raises(ValueError, match="two or more"):
        bench.fit_line(xs, ys)


def test_slope_times_forks_is_the_per_host_task_time_it_implies():
    assert bench.per_host_task_seconds(0.5, 20) == 10.0


def test_growth_orders_by_seconds_added_per_node():
    rows = bench.growth({"a": 1.0, "b": 5.0, "gone": 2.0}, {"a": 31.0, "b": 8.0, "new": 6.0},
                        2, 32)
    assert [r[0] for r in rows] == ["a", "new", "b", "gone"]
    assert rows[0] == ("a", 1.0, 31.0, 1.0)
    assert rows[-1][3] == pytest.approx(-2.0 / 30)


def test_memory_forecast():
    assert bench.predict_host_gib([], 8) is None
    assert bench.predict_host_gib([(2, 1.5)], 8) == pytest.approx(4.5)  # 9 machines, not 3
    assert bench.predict_host_gib([(2, 1.0), (8, 2.2)], 32) == pytest.approx(7.0)
    # a line that falls with N is never believed below what was measured
    assert bench.predict_host_gib([(2, 3.0), (8, 2.0)], 32) == 3.0


def _run(seconds: float, changed: int = 0, cpu: float = 10.0) -> dict[str, Any]:
    return {"seconds": seconds, "changed": changed, "ok": 100, "failed": 0, "unreachable": 0,
            "rc": 0, "ansible_cpu_s": cpu, "ansible_main_cpu_s": cpu / 3, "host_cpu_s": 2 * cpu,
            "compute_cpu_s": cpu,
            "controller_cpu_s": 1.0, "host_min_available_gib": 20.0, "steps_per_node": 80.0,
            "roles": {"common": seconds / 4, "mpi": seconds / 2},
            "tasks": {"common : Install": seconds / 4}}


def _results() -> dict[str, Any]:
    sizes: list[dict[str, Any]] = [
        {"nodes": n, "available_before_gib": 21.0, "cold": _run(100 + 5 * n, 200, 30 + n),
         "converged": _run(20 + 0.5 * n, 0, 20 + n),
         "memory": bench.memory_summary({"ctl": {"usage": 1200.0, "working_set": 480.0,
                                                 "anon": 250.0},
                                         **{f"gpu-{i:03d}": {"usage": 980.0,
                                                             "working_set": 180.0,
                                                             "anon": 20.0}
                                            for i in range(1, n + 1)}})}
        for n in (2, 8, 16)]
    sizes.append({"nodes": 32, "skipped": "predicted 19.0 GiB (budget 18 GiB)"})
    return {"ansible": {"forks": 20, "strategy": "mitogen_linear", "pipelining": True},
            "host": {"cores": 2, "mem_gib": 23.4}, "sizes": sizes,
            "fits": bench.fits(sizes)}


def test_fits_per_series_at_1000_nodes():
    fits = _results()["fits"]
    assert fits["cold"]["slope"] == 5.0 and fits["cold"]["at_1000"] == 5100.0
    assert fits["converged"]["slope"] == 0.5 and fits["converged"]["at_1000"] == 520.0
    assert fits["cold_ansible_cpu"]["slope"] == 1.0


def test_fits_leave_out_sizes_that_did_not_finish():
    sizes = _results()["sizes"][:1] + [{"nodes": 8, "error": "configure failed"}]
    assert bench.fits(sizes) == {}


def test_report_table_has_ratios_to_the_smallest_size_and_says_what_was_not_run():
    lines: list[str] = []
    bench.report(_results(), lines.append)
    text = "\n".join(lines)
    row16 = next(x for x in lines if x.startswith("  16 "))
    assert row16.split()[:6] == ["16", "180.0", "1.64", "28.0", "1.33", "0"]
    assert "N=32: predicted 19.0 GiB (budget 18 GiB)" in text
    assert "slope 5.00 s/node" in text and "common : Install" in text
    assert ("each node adds 6 ms of wall time, 12 ms of ansible CPU and 4 ms of its main "
            "process per step") in text
    assert "0.33 CPU-s/node, 6 min at 1000 nodes whatever the forks" in text


def test_other_cpu_is_what_neither_ansible_nor_the_nodes_used():
    assert bench.other_cpu_seconds({"host_cpu_s": 100.0, "ansible_cpu_s": 30.0,
                                    "controller_cpu_s": 5.0, "compute_cpu_s": 40.0}) == 25.0


def test_plot_is_written(tmp_path):
    out = tmp_path / "img" / "scale.png"
    bench.plot(_results(), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- what the host and the nodes report ----------------------------------------------------

V1_STAT = """\
cache 32768
rss 1667072
total_cache 155086848
total_rss 79073280
total_shmem 8441856
total_inactive_file 21901312
total_active_file 124784640
"""
V2_STAT = "anon 20971520\nfile 104857600\nshmem 1048576\ninactive_file 52428800\n"


def test_memory_of_a_cgroup_v1_container():
    figures = bench.memory_figures(244469760, bench.parse_memory_stat(V1_STAT))
    assert figures == {"usage": 233.1, "working_set": 212.3, "anon": 83.5}


def test_memory_of_a_cgroup_v2_container():
    figures = bench.memory_figures(150 * bench.MIB, bench.parse_memory_stat(V2_STAT))
    assert figures == {"usage": 150.0, "working_set": 100.0, "anon": 21.0}


def test_memory_summary_keeps_the_controller_apart():
    summary = bench.memory_summary({
        "ctl": {"usage": 1200.0, "working_set": 500.0, "anon": 250.0},
        "gpu-001": {"usage": 900.0, "working_set": 150.0, "anon": 20.0},
        "gpu-002": {"usage": 1100.0, "working_set": 250.0, "anon": 30.0}})
    assert (summary["compute_mean_usage_mib"], summary["controller_usage_mib"],
            summary["total_usage_mib"]) == (1000.0, 1200.0, 3200.0)
    assert summary["compute_mean_anon_mib"] == 25.0


def test_ansible_settings_of_the_project_config():
    assert bench.ansible_settings(env={}) == {"forks": 20, "strategy": "mitogen_linear",
                                              "pipelining": True}


def test_ansible_settings_environment_wins(tmp_path):
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\nforks = 20  # comment\n")
    assert bench.ansible_settings(cfg, {"ANSIBLE_FORKS": "50", "ANSIBLE_STRATEGY": "free"}) == {
        "forks": 50, "strategy": "free", "pipelining": False}


def test_host_busy_seconds_leave_out_idle_and_iowait():
    clk = bench.os.sysconf("SC_CLK_TCK")
    stat = f"cpu  {clk * 3} 0 {clk} {clk * 100} {clk * 7} 0 0 0 0 0\ncpu0 1 2 3 4\n"
    assert bench.host_busy_seconds(stat) == pytest.approx(4.0)


def test_process_cpu_seconds_are_its_own_not_its_childrens():
    clk = bench.os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 10 + [str(clk * 2), str(clk), str(clk * 50), str(clk * 50)]
    stat = "4242 (ansible-playbook (x)) " + " ".join(fields) + " 20 0 1\n"
    assert bench.process_cpu_seconds(stat) == 3.0


def test_mem_available():
    assert bench.mem_available_gib("MemTotal: 1 kB\nMemAvailable:    2097152 kB\n") == 2.0


def test_the_sizes_stop_after_one_that_did_not_converge(tmp_path, monkeypatch):
    """A second configure that still changes tasks ends the run at that size: the next,
    larger size would measure the same drift, only slower."""
    measured = []

    def measure(row, _out, _keep, _say, _bare):
        measured.append(row["nodes"])
        row["converged"] = {"changed": 3 if row["nodes"] == 2 else 0}

    monkeypatch.setattr(bench, "measure_size", measure)
    monkeypatch.setattr(bench, "too_big", lambda *_a: None)
    monkeypatch.setattr(bench, "fits", lambda _sizes: {})
    results = {"sizes": []}
    args = bench.argparse.Namespace(out=tmp_path, keep=False, bare=False)
    rc = bench.run_sizes(results, [1, 2, 4, 8], args, tmp_path / "results.json")
    assert (rc, measured) == (1, [1, 2])
    assert [row["nodes"] for row in results["sizes"]] == [1, 2]
