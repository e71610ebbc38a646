"""Filters that build Slurm's configuration files (the slurm_controller and slurmdbd roles):
node, partition and gres.conf records from inventory vars and gathered facts, settings as
Slurm writes them, records adapted to the controller's Slurm release, hostlists."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.metalslurm.cluster.plugins.module_utils import (
    gpu,
    slurm_upgrade,
    slurm_versions,
    slurmconf,
)
from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import LAUNCH_TERMINATE
from ansible_collections.metalslurm.cluster.plugins.plugin_utils.filters import (
    filter_errors,
    host_view,
    hostvar,
    var_of,
)

slurm_errors = filter_errors(slurmconf.SlurmConfError)

# What the filters below read of a compute node (and of its facts): compute_view copies it
# once per node, so that the slurm_controller role reads each node's variables once a run.
VIEW_VARS = ("metalslurm_node_options", "metalslurm_gpu_count", "metalslurm_gpu_type",
             "metalslurm_node_state", "metalslurm_node", "metalslurm_power")
VIEW_FACTS = ("processor_count", "processor_cores", "processor_threads_per_core", "memtotal_mb")
_ABSENT = object()


def compute_view(hosts: list[str], hostvars: Any) -> dict[str, dict[str, Any]]:
    """host -> the variables of it that slurm_nodes, gpu_facts, gres_records and
    compute_summary read (VIEW_VARS, and VIEW_FACTS of its ansible_facts), undefined ones
    left out. The filters take it in place of ``hostvars``: each ``hostvars[host]`` makes Ansible
    merge every variable of the host again, and the role's lazy vars would do that for each
    node every time they are used (at 1,024 nodes, 11 s of a 15 s render; docs/lab/scale-lab.md)."""
    view: dict[str, dict[str, Any]] = {}
    for h in hosts:
        host = host_view(hostvars, h)
        node = {k: v for k in VIEW_VARS if (v := var_of(host, k, _ABSENT)) is not _ABSENT}
        facts = var_of(host, "ansible_facts", {}) or {}
        picked = {k: facts[k] for k in VIEW_FACTS if k in facts}
        if picked:
            node["ansible_facts"] = picked
        view[h] = node
    return view


@slurm_errors
def slurm_nodes(hosts: list[str], hostvars: Any, memory_reserve_percent: int = 3) -> list[dict]:
    """NodeName records for slurm.conf from inventory vars and gathered facts."""
    records = []
    for h in hosts:
        view = host_view(hostvars, h)

        def fact(name: str, host: str = h, view: Any = view) -> Any:
            value = (var_of(view, "ansible_facts", {}) or {}).get(name)
            if value is None:
                raise AnsibleFilterError(
                    f"slurm.conf needs fact ansible_facts.{name} of compute host {host}: "
                    "run the whole playbook (facts are gathered on every node) or set it "
                    "in metalslurm_node_options")
            return value
        options = dict(var_of(view, "metalslurm_node_options", {}) or {})
        record: dict[str, Any] = {"NodeName": h}
        if not {"CPUs", "Sockets", "RealMemory"} <= options.keys():
            record.update({
                "Sockets": int(fact("processor_count")),
                "CoresPerSocket": int(fact("processor_cores")),
                "ThreadsPerCore": int(fact("processor_threads_per_core")),
                "RealMemory": int(fact("memtotal_mb")) * (100 - memory_reserve_percent)
                // 100,
            })
        gpus = int(var_of(view, "metalslurm_gpu_count", 0) or 0)
        if gpus:
            record["Gres"] = f"gpu:{var_of(view, 'metalslurm_gpu_type')}:{gpus}"
        state = var_of(view, "metalslurm_node_state", "static")
        record["State"] = "CLOUD" if state == "cloud" else "UNKNOWN"
        if state == "cloud":
            # Jobs fill nodes that are already on first (lowest Weight first).
            record["Weight"] = 100
        record.update(options)
        records.append(record)
    return records


def def_mem_per_cpu(nodes: list[dict]) -> int | None:
    """DefMemPerCPU that gives a job its share of the smallest node's memory per CPU.

    Slurm's own default with CR_*_Memory is a whole node's memory per job, which keeps one
    small job from sharing a GPU node with another; a fixed small value starves training
    jobs that do not pass --mem. None when no node says how much memory it has.
    """
    shares = []
    for node in nodes:
        cpus = node.get("CPUs") or (int(node.get("Sockets", 1)) * int(node.get("CoresPerSocket", 1))
                                    * int(node.get("ThreadsPerCore", 1)))
        if node.get("RealMemory") and cpus:
            shares.append(int(node["RealMemory"]) // int(cpus))
    return min(shares) if shares else None


def gpu_facts(hosts: list[str], hostvars: Any, cached: dict | None = None) -> dict[str, list]:
    """host -> its GPUs as the driver sees them: this run's ``metalslurm_node.gpus`` (the
    node facts contract), else ``cached`` (what the controller kept from an earlier run, for
    a node that is not up now); hosts with neither are left out."""
    found = {}
    for h in hosts:
        gpus = (var_of(host_view(hostvars, h), "metalslurm_node") or {}).get("gpus") or \
            (cached or {}).get(h)
        if gpus:
            found[h] = list(gpus)
    return found


@slurm_errors
def gres_records(hosts: list[str], hostvars: Any,
                 gpus_of: dict[str, list] | None = None) -> list[dict]:
    """gres.conf records (grouped into hostlists when rendered): from a node's GPU facts
    (``gpus_of``, see :func:`gpu_facts`) one record per set of GPUs sharing a CPU affinity,
    with Cores=; without facts (no driver yet, fake GPUs) the inventory's count of
    /dev/nvidiaN files."""
    records = []
    for h in hosts:
        view = host_view(hostvars, h)
        gpus = int(var_of(view, "metalslurm_gpu_count", 0) or 0)
        if not gpus:
            continue
        gtype = var_of(view, "metalslurm_gpu_type")
        facts = (gpus_of or {}).get(h)
        if facts and len(facts) == gpus:
            records.extend(gpu.gres_gpu_records(h, facts, gtype))
        else:
            records.append({"NodeName": h, "Name": "gpu", "Type": gtype,
                            "File": slurmconf.gpu_device_files(gpus)})
    return records


@slurm_errors
def partition_records(partitions: list[dict], options: dict | None,
                      default_time: str) -> list[dict]:
    """PartitionName records from the inventory's metalslurm_partitions list.

    A partition without ``default_time`` (a hand-written inventory) gets ``default_time``,
    capped at its MaxTime: a job submitted without --time then has a bounded limit, which
    GPU-minute budgets (AccountingStorageEnforce=safe) need to let it start.
    """
    records = []
    for part in partitions:
        max_time = part.get("max_time", "UNLIMITED")
        record = {"PartitionName": part["name"], "Nodes": list(part["nodes"]),
                  "Default": bool(part.get("default", False)),
                  "MaxTime": max_time,
                  "DefaultTime": part.get("default_time") or slurmconf.shorter_time(
                      default_time, max_time),
                  "State": "UP"}
        record.update(dict(options or {}))
        record.update(part.get("options") or {})
        records.append(record)
    return records


@slurm_errors
def slurm_records(records: list[dict], first_key: str) -> list[str]:
    """Records rendered one line per identical attribute set (see slurmconf.grouped_lines)."""
    return slurmconf.grouped_lines(first_key, records)


def fit_slurm_release(files: dict[str, Any], version: str) -> dict[str, Any]:
    """Every file's settings as Slurm ``version`` takes them (module_utils/slurm_versions.py).

    ``files`` maps a kind (slurm.conf, cgroup.conf, gres.conf, node, partition) to a dict
    of settings or a list of records. Returns the same shape, adapted where the release
    offers an equivalent, with ``notes`` (one sentence per adaptation); raises with one
    sentence per setting the release cannot take, so nothing is written.
    """
    if not str(version).strip():
        raise AnsibleFilterError("cannot tell which Slurm release the controller runs: "
                                 "slurmctld is neither installed nor available from apt")
    fitted: dict[str, Any] = {}
    notes: list[str] = []
    problems: list[str] = []
    for kind, settings in files.items():
        records = settings if isinstance(settings, list) else [settings]
        out = []
        for record in records:
            try:
                adapted, record_notes = slurm_versions.check_settings(kind, record, version)
            except slurm_versions.SlurmVersionError as exc:
                problems += [p for p in exc.problems if p not in problems]
                continue
            out.append(adapted)
            notes += [n for n in record_notes if n not in notes]
        fitted[kind] = out if isinstance(settings, list) else (out[0] if out else {})
    if problems:
        raise AnsibleFilterError(f"Slurm {version} on the controller cannot take "
                                 f"{len(problems)} setting(s): " + " | ".join(problems))
    fitted["notes"] = notes
    return fitted


@slurm_errors
def compute_summary(hosts: list[str], hostvars: Any, memory_reserve_percent: int = 3,
                    cached_gpus: dict | None = None) -> dict[str, Any]:
    """Everything slurm.conf and gres.conf take from the compute nodes, in one pass over
    :func:`compute_view`: ``nodes`` (NodeName records), ``cloud`` and ``static`` hosts,
    ``has_gpus``, ``gpu_types``, ``gpus`` (:func:`gpu_facts`), ``gres`` (gres.conf records),
    ``job_prolog`` (the hosts whose metalslurm_node says the prolog is installed) and
    ``launched`` (the launch-terminate hosts: no configure finds one up, and each of its
    machines is made from nothing and joined through the whole playbook, which installs the
    prolog before slurmd starts; counted as having it, never recorded as having installed it).

    The slurm_controller role works it out once a run (tasks/render.yml) and its vars read
    it. Its lazy vars, each reading the nodes' hostvars, were evaluated again every time a
    setting used them (Ansible renders a dict's values again at each ``combine``): at 1,024
    nodes that was 10 of the render's 15 s (docs/lab/scale-lab.md)."""
    view = compute_view(hosts, hostvars)
    cloud = [h for h in hosts if view[h].get("metalslurm_node_state") == "cloud"]
    gpus = gpu_facts(hosts, view, cached_gpus)
    return {
        "nodes": slurm_nodes(hosts, view, memory_reserve_percent),
        "cloud": cloud,
        "static": [h for h in hosts if h not in set(cloud)],
        "has_gpus": any(int(view[h].get("metalslurm_gpu_count") or 0) > 0 for h in hosts),
        "gpu_types": sorted({str(t) for h in hosts if (t := view[h].get("metalslurm_gpu_type"))}),
        "gpus": gpus,
        "gres": gres_records(hosts, view, gpus),
        "job_prolog": [h for h in hosts
                       if isinstance(view[h].get("metalslurm_node"), dict)
                       and "job_prolog" in view[h]["metalslurm_node"]],
        "launched": [h for h in hosts if isinstance(view[h].get("metalslurm_power"), dict)
                     and view[h]["metalslurm_power"].get("mode") == LAUNCH_TERMINATE],
    }


# The inventory group of each daemon in slurm_upgrade.DAEMON_ORDER (every Slurm host has the
# client commands).
DAEMON_GROUPS = {"slurmdbd": "slurmdbd", "slurmctld": "slurm_controller", "slurmd": "slurm_compute"}


@filter_errors(slurm_versions.SlurmVersionError)
def release_check(hosts: list[str], hostvars: Any, groups: Any,
                  outside: dict[str, Any] | None = None,
                  result: str = "_slurm_common_releases",
                  upgrade: bool = False) -> dict[str, Any]:
    """``{"problems": [...], "notes": [...], "upgrades": {host: ["PACKAGE=VERSION"]}}`` of
    slurm_upgrade.release_problems for ``hosts``, each read from its registered ``result``
    (roles/slurm_common/tasks/releases.yml), and for the hosts of ``outside`` ({host:
    registered result}: the controller read for a run limited to other hosts; a skipped read
    is left out). A host without a result (unreachable, set aside) is left out. With
    ``upgrade`` (``--upgrade-slurm``) and no problem, ``upgrades`` names what to install on
    each host of ``hosts`` offered a newer build; otherwise it is empty."""
    registered = {h: hostvar(hostvars, h, result) for h in hosts}
    registered.update({h: r for h, r in (outside or {}).items() if h not in registered})
    read = []
    for h, found in registered.items():
        if not isinstance(found, dict) or "stdout" not in found:
            continue
        daemons = [d for d, g in DAEMON_GROUPS.items() if h in (groups.get(g) or [])]
        read_one = slurm_upgrade.read_host(h, daemons + ["client"], found["stdout"])
        # A host outside the play is not upgraded by it: judged by the release it runs.
        read.append(read_one if h in hosts else dataclasses.replace(read_one, newer=()))
    problems, notes = slurm_upgrade.release_problems(read, upgrade=bool(upgrade))
    planned = slurm_upgrade.upgrades(h for h in read if h.host in hosts) \
        if upgrade and not problems else {}
    # slurmdbd goes first: slurmctld is not upgraded while a slurmdbd host goes unread (a
    # --limit leaving it out, or unreachable), whose release could then fall behind.
    unread = sorted(set(groups.get("slurmdbd") or []) - {h.host for h in read})
    if unread and set(planned) & set(groups.get("slurm_controller") or []):
        problems.append(
            f"{', '.join(unread)}: slurmdbd's host was not read in this run (left out by "
            "--limit, or unreachable), and --upgrade-slurm upgrades slurmctld only once "
            "slurmdbd runs the same build or a newer one: run with slurmdbd's host too")
        planned = {}
    return {"problems": problems, "notes": notes, "upgrades": planned}


def slurmctld_hosts(hosts: list[str], hostvars: Mapping[str, Any]) -> list[str]:
    """slurm.conf's ``SlurmctldHost`` values, ``name(address)``, in the order given (the
    controller first, then its backup): one line each (slurmconf.REPEATED_SETTINGS)."""
    return [f"{h}({hostvars[h]['metalslurm_address']})" for h in hosts]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "compute_summary": compute_summary,
            "slurmctld_hosts": slurmctld_hosts,
            "slurm_nodes": slurm_nodes,
            "gpu_facts": gpu_facts,
            "gres_records": gres_records,
            "def_mem_per_cpu": def_mem_per_cpu,
            "partition_records": partition_records,
            "slurm_settings": slurm_errors(slurmconf.settings_lines),
            "slurm_records": slurm_records,
            "partition_lines": slurm_errors(slurmconf.partition_lines),
            "hostlist": slurm_errors(slurmconf.compress_hostlist),
            "fit_slurm_release": fit_slurm_release,
            "slurm_release_check": release_check,
            "reconfigure_takes_nodes": filter_errors(slurm_versions.SlurmVersionError)(
                slurm_versions.reconfigure_takes_nodes),
        }
