"""Jinja filters for the metalslurm roles.

Thin adapters: the logic lives in the ``infra`` package (unit-tested there) so the
operator-side Python and the playbook apply the same rules and render the same files.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from infra import containers, gpu, inventory, nccl, slurm_versions, slurmconf, topology, wheel
except ImportError:  # running ansible-playbook from a checkout without 'pip install -e .'
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from infra import containers, gpu, inventory, nccl, slurm_versions, slurmconf, topology, wheel

# Operator-side build output (git-ignored), e.g. the power programs' wheel.
BUILD_DIR = Path(__file__).resolve().parents[2] / ".metalslurm" / "build"


def _hostvar(hostvars: Any, host: str, key: str, default: Any = None) -> Any:
    try:
        value = hostvars[host][key]
    except (KeyError, TypeError):
        return default
    if type(value).__name__ == "AnsibleUndefined":
        return default
    return value


def inventory_problems(groups: dict[str, list[str]], hostvars: Any) -> list[str]:
    """The inventory contract's broken rules, one sentence each (empty list = valid)."""
    keys = ("metalslurm_address", "metalslurm_private_cidr", "metalslurm_gpu_count",
            "metalslurm_gpu_type", "metalslurm_node_state", "metalslurm_partitions",
            "metalslurm_shared_storage")
    names = {h for g in inventory.GROUPS for h in groups.get(g, [])}
    view_hostvars = {h: {k: _hostvar(hostvars, h, k) for k in keys
                         if _hostvar(hostvars, h, k) is not None} for h in names}
    view = {"groups": {g: list(groups.get(g, [])) for g in inventory.GROUPS},
            "hostvars": view_hostvars}
    return inventory.inventory_problems(view)


def slurm_nodes(hosts: list[str], hostvars: Any, memory_reserve_percent: int = 3) -> list[dict]:
    """NodeName records for slurm.conf from inventory vars and gathered facts."""
    records = []
    for h in hosts:
        def fact(name: str, host: str = h) -> Any:
            value = _hostvar(hostvars, host, name)
            if value is None:
                raise AnsibleFilterError(
                    f"slurm.conf needs fact {name} of compute host {host}: run the whole "
                    "playbook (facts are gathered on every node) or set it in "
                    "metalslurm_node_options")
            return value
        options = dict(_hostvar(hostvars, h, "metalslurm_node_options", {}) or {})
        record: dict[str, Any] = {"NodeName": h}
        if not {"CPUs", "Sockets", "RealMemory"} <= options.keys():
            record.update({
                "Sockets": int(fact("ansible_processor_count")),
                "CoresPerSocket": int(fact("ansible_processor_cores")),
                "ThreadsPerCore": int(fact("ansible_processor_threads_per_core")),
                "RealMemory": int(fact("ansible_memtotal_mb")) * (100 - memory_reserve_percent)
                // 100,
            })
        gpus = int(_hostvar(hostvars, h, "metalslurm_gpu_count", 0) or 0)
        if gpus:
            record["Gres"] = f"gpu:{_hostvar(hostvars, h, 'metalslurm_gpu_type')}:{gpus}"
        state = _hostvar(hostvars, h, "metalslurm_node_state", "static")
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


def gres_records(hosts: list[str], hostvars: Any, cached: dict | None = None) -> list[dict]:
    """gres.conf records (grouped into hostlists when rendered): from a node's GPU facts
    (this run's, or the controller's cache for a node that is powered down now) one record
    per set of GPUs sharing a CPU affinity, with Cores=; without facts (no driver yet, fake
    GPUs) the inventory's count of /dev/nvidiaN files."""
    records = []
    for h in hosts:
        gpus = int(_hostvar(hostvars, h, "metalslurm_gpu_count", 0) or 0)
        if not gpus:
            continue
        gtype = _hostvar(hostvars, h, "metalslurm_gpu_type")
        facts = (_hostvar(hostvars, h, "ansible_facts") or {}).get("metalslurm_gpus") \
            or (cached or {}).get(h)
        if facts and len(facts) == gpus:
            records.extend(gpu.gres_gpu_records(h, facts, gtype))
        else:
            records.append({"NodeName": h, "Name": "gpu", "Type": gtype,
                            "File": slurmconf.gpu_device_files(gpus)})
    return records


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


def slurm_records(records: list[dict], first_key: str) -> list[str]:
    """Records rendered one line per identical attribute set (see slurmconf.grouped_lines)."""
    return slurmconf.grouped_lines(first_key, records)


def mount_unit_name(path: str) -> str:
    """The systemd mount unit for ``path`` (what ``systemd-escape --path --suffix=mount``
    prints): ``/home`` -> ``home.mount``, ``/data/ckpt-1`` -> ``data-ckpt\\x2d1.mount``."""
    return slurmconf.mount_unit_name(path)


def fit_slurm_release(files: dict[str, Any], version: str) -> dict[str, Any]:
    """Every file's settings as Slurm ``version`` takes them (infra/slurm_versions.py).

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


def service_up(services: dict[str, Any], name: str) -> bool:
    """True when ``ansible_facts.services`` (service_facts) shows systemd unit ``name``
    running and enabled: a task that would only keep it so can be skipped."""
    unit = services.get(name if name.endswith(".service") else f"{name}.service") or {}
    return unit.get("state") == "running" and unit.get("status") == "enabled"


def metalslurm_wheel(project_dir: str, out_dir: str | None = None) -> str:
    """The path of a reproducible wheel of the Python project in ``project_dir``, built on
    the operator's machine into ``.metalslurm/build`` (see infra/wheel.py)."""
    try:
        return str(wheel.build_wheel(project_dir, out_dir or BUILD_DIR))
    except (OSError, wheel.WheelError) as exc:
        raise AnsibleFilterError(f"cannot build a wheel of {project_dir}: {exc}") from exc


def topology_from_inventory(hosts: list[str], hostvars: Any,
                            settings: dict[str, Any]) -> dict[str, Any]:
    """{content, problems}: topology.conf from each compute host's metalslurm_switch."""
    switch_of = {h: _hostvar(hostvars, h, "metalslurm_switch") for h in hosts}
    content, problems = topology.topology_from_inventory(hosts, switch_of, settings)
    return {"content": content, "problems": problems}


def discovered_topology(stdout: str, hosts: list[str], previous: str, plugin: str = "tree",
                        block_sizes: list[int] | None = None) -> dict[str, Any]:
    """{content, warnings, missing, unmatched, unnamed} from ibnetdiscover's output."""
    return topology.discovered_topology(stdout, hosts, previous, plugin, block_sizes)


def interface_of(facts: dict[str, Any], address: str) -> str:
    """The network interface carrying ``address`` in gathered facts ('' if none)."""
    for name in facts.get("interfaces") or []:
        iface = facts.get(name.replace("-", "_")) or facts.get(name) or {}
        addresses = [(iface.get("ipv4") or {}).get("address")]
        addresses += [a.get("address") for a in iface.get("ipv4_secondaries") or []]
        if address in addresses:
            return str(iface.get("device") or name)
    return ""


def nccl_settings(hcas: list[dict[str, Any]], host: str, socket_ifname: str, gpudirect: str,
                  overrides: dict[str, Any]) -> dict[str, Any]:
    """{settings, problems, warnings} for one node (infra/nccl.py)."""
    result = nccl.derive_nccl_settings(
        hcas, host=host, socket_ifname=socket_ifname or None,
        gpudirect=None if gpudirect in ("", "none") else gpudirect,
        overrides={str(k): str(v) for k, v in (overrides or {}).items()})
    return {"settings": result.settings, "problems": result.problems,
            "warnings": result.warnings}


def _wrap(func):
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (slurmconf.SlurmConfError, containers.ContainersError,
                topology.TopologyError) as exc:
            raise AnsibleFilterError(str(exc)) from exc
    return wrapper


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "metalslurm_inventory_problems": inventory_problems,
            "metalslurm_slurm_nodes": _wrap(slurm_nodes),
            "metalslurm_gres_records": _wrap(gres_records),
            "metalslurm_def_mem_per_cpu": def_mem_per_cpu,
            "metalslurm_partition_records": _wrap(partition_records),
            "metalslurm_slurm_settings": _wrap(slurmconf.settings_lines),
            "metalslurm_slurm_records": _wrap(slurm_records),
            "metalslurm_partition_lines": _wrap(slurmconf.partition_lines),
            "metalslurm_hostlist": _wrap(slurmconf.compress_hostlist),
            "metalslurm_mount_unit": _wrap(mount_unit_name),
            "metalslurm_wheel": metalslurm_wheel,
            "metalslurm_fit_slurm_release": fit_slurm_release,
            "metalslurm_service_up": service_up,
            "metalslurm_artifact_sources": _wrap(containers.artifact_sources),
            "metalslurm_artifact_problems": containers.artifact_problems,
            "metalslurm_local_artifact_problems": containers.local_artifact_problems,
            "metalslurm_credentials_problems": containers.credentials_problems,
            "metalslurm_netrc_block": _wrap(containers.netrc_block),
            "metalslurm_plugstack_line": _wrap(containers.plugstack_line),
            "metalslurm_enroot_settings": _wrap(containers.enroot_settings),
            "metalslurm_topology_from_inventory": _wrap(topology_from_inventory),
            "metalslurm_discovered_topology": _wrap(discovered_topology),
            "metalslurm_interface_of": interface_of,
            "metalslurm_nccl_settings": nccl_settings,
            "metalslurm_nccl_setting_problems": nccl.setting_problems,
            "metalslurm_nccl_conf": nccl.render_nccl_conf,
            "metalslurm_nccl_env": nccl.render_nccl_env,
            "metalslurm_os_release": gpu.os_release,
            "metalslurm_gpu_problems": gpu.gpu_problems,
            "metalslurm_nvidia_driver_packages": gpu.driver_packages,
            "metalslurm_dcgm_package": gpu.dcgm_package,
            "metalslurm_nvidia_repositories": gpu.repositories,
            "metalslurm_nvidia_key_problems": gpu.key_problems,
            "metalslurm_gpu_facts_problems": gpu.facts_problems,
            "metalslurm_cached_gpu_facts": gpu.cached_facts,
        }
