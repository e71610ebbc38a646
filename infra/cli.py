"""``metalslurm``: the operator command line.

Everything here is also possible with the plain tools (pulumi, ansible-playbook,
pytest); the CLI adds progress output and timings, never hidden behaviour.

Bad input (a file that cannot be read as what it should be, a malformed hostlist, time,
price or KEY=VALUE) is refused before a command does anything, with one line on stderr
naming the argument and exit status 2: every command reads its inputs through
:mod:`infra.stack.inputs`, whose :class:`~infra.stack.inputs.InputError` :func:`main` catches. Any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import NoReturn

from infra.ops import local
from infra.ops.inventory_file import load_inventory
from infra.ops.output import error, say
from infra.stack.config import load_stack_file
from infra.stack.inputs import (
    InputError,
    parse_key_value,
    parse_yaml_text,
)
from infra.stack.inventory import InventoryError
from infra.stack.schema import ConfigError

DEFAULT_STACK = Path("Pulumi.local.yaml")
EXIT_INPUT = 2  # bad input, refused before anything was done
EXIT_FAILED = 1  # a provider, podman or image step failed, with a message saying why


def cmd_local_up(args: argparse.Namespace) -> int:
    return local.up(args.stack, configure=not args.no_configure, verify=not args.no_verify,
                    verbose=args.verbose, drain_wait=args.drain_wait)


def cmd_local_down(args: argparse.Namespace) -> int:
    return local.down(args.stack)


def cmd_local_status(args: argparse.Namespace) -> int:
    return local.status(args.stack)


def cmd_local_exec(args: argparse.Namespace) -> int:
    return local.exec_words(args.stack, list(args.words), interactive=sys.stdin.isatty())


def cmd_image_build(args: argparse.Namespace) -> int:
    return local.image_build(args.stack)


def parse_extra_vars(items: list[str]) -> dict[str, object]:
    """``-e KEY=VALUE`` items: KEY an Ansible variable name, VALUE read as YAML."""
    extra_vars: dict[str, object] = {}
    for item in items:
        key, value = parse_key_value(item, "-e", "KEY=VALUE (VALUE is read as YAML)",
                                     "slurm_controller_default_time=2:00:00")
        if not key.isidentifier():
            raise InputError("-e", f"{key!r} is not an Ansible variable name (letters, digits "
                             "and '_', not starting with a digit); write KEY=VALUE", repr(item))
        extra_vars[key] = (parse_yaml_text(value, "-e", "KEY=VALUE with VALUE in YAML",
                                           repr(item)) if value else "")
    return extra_vars


def cmd_configure(args: argparse.Namespace) -> int:
    from infra.ops.configure import heartbeat_for, print_summary, run_playbook
    from infra.ops.preflight import become_password, checked_drain_wait

    extra_vars = parse_extra_vars(args.extra_vars)
    if args.drain_wait is not None:
        extra_vars["metalslurm_drain_wait"] = checked_drain_wait(args.drain_wait)
    if args.upgrade_slurm:
        extra_vars["metalslurm_slurm_upgrade"] = True
    load_inventory(args.inventory, "--inventory")

    password = become_password(args.become_password_file, args.ask_become_pass)
    result = run_playbook(args.inventory, limit=args.limit, tags=args.tags, check=args.check,
                          verbosity=args.verbose, extra_vars=extra_vars, out=say,
                          heartbeat=heartbeat_for(say), become_password=password)
    print_summary(result, out=say)
    return result.rc


def cmd_verify(args: argparse.Namespace) -> int:
    from infra.ops.verify import run_verify

    load_inventory(args.inventory, "--inventory")
    return run_verify(args.inventory, out=say)


def cmd_preflight(args: argparse.Namespace) -> int:
    from infra.ops import byo, preflight

    if args.inventory is not None:
        # Each file given is read first, so that a bad one is named for what it is.
        if args.ssh_key is not None:
            byo.checked_ssh_key(args.ssh_key)
        byo.read_bmc_credentials(args.bmc_credentials)
        for given, option in ((args.ssh_key, "--ssh-key"),
                              (args.bmc_credentials, "--bmc-credentials")):
            if given is not None:
                raise InputError(option, "goes with --stack only (with -i, the inventory says "
                                 "how to reach the hosts); leave it out", given)
        return preflight.preflight(args.inventory, become_password_file=args.become_password_file,
                                   ask_become_pass=args.ask_become_pass, lock_wait=args.lock_wait,
                                   ssh_wait=args.ssh_wait)
    return byo.preflight_stack(
        args.stack, ssh_key=args.ssh_key, bmc_credentials=args.bmc_credentials,
        password=preflight.become_password(args.become_password_file, args.ask_become_pass),
        lock_wait=args.lock_wait, ssh_wait=args.ssh_wait)


def cmd_up(args: argparse.Namespace) -> int:
    from infra.ops import byo
    from infra.ops.preflight import become_password

    return byo.up(args.stack, ssh_key=args.ssh_key, bmc_credentials=args.bmc_credentials,
                  lock_wait=args.lock_wait, drain_wait=args.drain_wait,
                  configure=not args.no_configure, verify=not args.no_verify,
                  password=become_password(args.become_password_file, args.ask_become_pass))


def cmd_topology_discover(args: argparse.Namespace) -> int:
    from infra.ops import topology

    return topology.discover(args.inventory, check=args.check)


def cmd_topology_from_file(args: argparse.Namespace) -> int:
    from infra.ops import topology

    return topology.from_file(args.ibnetdiscover, inventory=args.inventory, nodes=args.nodes,
                              previous_file=args.previous, plugin=args.plugin)


def cmd_config_validate(args: argparse.Namespace) -> int:
    from infra.stack.config import config_summary

    notes: list[str] = []
    try:
        cfg = load_stack_file(args.stack_file, "STACK_FILE")
    except ConfigError as strict:
        # A byo stack for 'metalslurm up' holds no secret (the key and the BMC credentials
        # are files on its command line): valid, with what 'pulumi up' would still need.
        from infra.stack.config import SECRETS_AS_FILES
        try:
            cfg = load_stack_file(args.stack_file, "STACK_FILE",
                                  secrets_given=SECRETS_AS_FILES)
        except ConfigError:
            raise strict from None
        if cfg.provider != "byo":
            raise strict from None
        notes = strict.problems
    say(f"{args.stack_file}: valid. {config_summary(cfg)}")
    for note in notes:
        say(f"NOTE: for 'pulumi up' ('metalslurm up' takes --ssh-key and --bmc-credentials "
            f"instead): {note}")
    return 0


def cmd_wheelhouse(args: argparse.Namespace) -> int:
    from infra.ops import wheelhouse

    return wheelhouse.build(args.dest, python=args.python, stack=args.stack,
                            requirements=args.requirements)


def cmd_report_usage(args: argparse.Namespace) -> int:
    from infra.ops import report

    return report.usage(start=args.start, end=args.end, price=args.price, prices=args.prices,
                        from_file=args.from_file, inventory=args.inventory, stack=args.stack,
                        as_csv=args.csv)


def cmd_accept(args: argparse.Namespace) -> int:
    from infra.ops import accept

    return accept.run_gate(args.inventory, nodes=args.nodes, level=args.level, html=args.html)


def cmd_accept_report(args: argparse.Namespace) -> int:
    from infra.ops import accept

    return accept.report_run(args.inventory, run=args.run, html=args.html)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its usage errors said on one line like every other input error
    (subcommands' parsers are of the same class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INPUT, f"error: {self.prog}: {message} (see '{self.prog} --help')\n")


_Commands = argparse._SubParsersAction  # what add_subparsers returns


def _add_local(sub: _Commands) -> None:
    """``local up|down|status|exec``: the local cluster of podman nodes."""
    local = sub.add_parser("local", help="the local cluster of podman nodes")
    local_sub = local.add_subparsers(dest="local_command", required=True)
    stack_help = f"stack config file (default {DEFAULT_STACK})"
    up = local_sub.add_parser("up", help="build, configure and verify the local cluster")
    up.add_argument("--stack", type=Path, default=DEFAULT_STACK, help=stack_help)
    up.add_argument("--no-configure", action="store_true", help="only create the nodes")
    up.add_argument("--no-verify", action="store_true", help="skip the testinfra suite")
    up.add_argument("-v", "--verbose", action="store_true", help="print every changed task")
    up.add_argument("--drain-wait", type=float, default=None, metavar="SECONDS",
                    help="how long to wait for the jobs on nodes the config no longer "
                    "has (drained first) before refusing; default 0")
    up.set_defaults(func=cmd_local_up)
    down = local_sub.add_parser("down", help="remove the local cluster")
    down.add_argument("--stack", type=Path, default=DEFAULT_STACK, help=stack_help)
    down.set_defaults(func=cmd_local_down)
    status = local_sub.add_parser("status", help="list the nodes and their state")
    status.add_argument("--stack", type=Path, default=DEFAULT_STACK, help=stack_help)
    status.set_defaults(func=cmd_local_status)
    ex = local_sub.add_parser("exec", help="run a command on a node: exec [NODE] -- CMD (no "
                              "NODE: the submit host, the first login node else the controller)")
    ex.add_argument("--stack", type=Path, default=DEFAULT_STACK, help=stack_help)
    ex.add_argument("words", nargs=argparse.REMAINDER, metavar="[NODE] -- COMMAND")
    ex.set_defaults(func=cmd_local_exec)


def _add_image(sub: _Commands) -> None:
    """``image build``: the prepared node images of a stack."""
    image = sub.add_parser("image", help="prepared node images (the roles' install phase)")
    image_sub = image.add_subparsers(dest="image_command", required=True)
    build = image_sub.add_parser("build", help="build a local stack's prepared node images "
                                 "(one per node kind) unless they exist")
    build.add_argument("--stack", type=Path, default=DEFAULT_STACK,
                       help=f"stack config file (default {DEFAULT_STACK})")
    build.set_defaults(func=cmd_image_build)


def _add_become_password(parser: argparse.ArgumentParser) -> None:
    """--become-password-file FILE | -K: sudo's password, for a user that needs one."""
    pw = parser.add_mutually_exclusive_group()
    pw.add_argument("--become-password-file", type=Path, metavar="FILE",
                    help="the sudo password, on the file's first line")
    pw.add_argument("-K", "--ask-become-pass", action="store_true",
                    help="ask for the sudo password")


def _add_configure(sub: _Commands) -> None:
    """``configure``: ansible/site.yml against an inventory."""
    conf = sub.add_parser("configure", help="run ansible/site.yml against an inventory")
    conf.add_argument("-i", "--inventory", required=True, type=Path)
    conf.add_argument("--limit")
    conf.add_argument("--tags")
    conf.add_argument("--check", action="store_true", help="Ansible check mode")
    conf.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE",
                      help="an Ansible extra variable (VALUE read as YAML); repeatable")
    conf.add_argument("-v", "--verbose", action="count", default=0)
    conf.add_argument("--drain-wait", type=float, default=None, metavar="SECONDS",
                      help="how long to wait for the jobs on nodes leaving the cluster "
                      "(drained first) before refusing; default 0 (sets metalslurm_drain_wait)")
    conf.add_argument("--upgrade-slurm", action="store_true",
                      help="upgrade Slurm to the newer build the hosts' apt sources offer, inside "
                      "Slurm's upgrade window: slurmdbd's host first (database backed up), then "
                      "slurmctld's, then the nodes, running jobs kept (before Slurm 24.11 they "
                      "start no new step after slurmd's restart; docs/how-to/day-2.md)")
    _add_become_password(conf)
    conf.set_defaults(func=cmd_configure)


def _add_verify(sub: _Commands) -> None:
    """``verify``: the testinfra suite against an inventory."""
    ver = sub.add_parser("verify", help="run the testinfra suite against an inventory")
    ver.add_argument("-i", "--inventory", required=True, type=Path)
    ver.set_defaults(func=cmd_verify)


def _add_preflight(sub: _Commands) -> None:
    """``preflight``: is every host of an inventory fit to become a node (read only)."""
    pre = sub.add_parser("preflight", help="check every host of an inventory (or of a byo "
                         "stack) before a configure (read only)")
    source = pre.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--inventory", type=Path)
    source.add_argument("--stack", type=Path, help="a byo stack file (with --ssh-key)")
    pre.add_argument("--ssh-key", type=Path, metavar="FILE",
                     help="with --stack: the SSH private key the hosts accept")
    pre.add_argument("--bmc-credentials", type=Path, metavar="FILE",
                     help="with --stack: the BMC credentials (JSON)")
    _add_become_password(pre)
    pre.add_argument("--lock-wait", type=float, default=None, metavar="SECONDS",
                     help="how long to wait for apt's lock to be released")
    pre.add_argument("--ssh-wait", type=float, default=None, metavar="SECONDS",
                     help="how long to try an unreachable host again (a machine still "
                     "booting; default 0)")
    pre.set_defaults(func=cmd_preflight)


def _add_up(sub: _Commands) -> None:
    """``up``: a byo cluster without the Pulumi engine."""
    up = sub.add_parser("up", help="pre-flight, inventory, configure and verify a byo stack's "
                        "existing servers (no Pulumi engine)")
    up.add_argument("--stack", required=True, type=Path, help="the byo stack file")
    up.add_argument("--ssh-key", required=True, type=Path, metavar="FILE",
                    help="the SSH private key the hosts accept (the inventory names it)")
    up.add_argument("--bmc-credentials", type=Path, metavar="FILE",
                    help="the BMC credentials of elastic hosts (JSON)")
    up.add_argument("--lock-wait", type=float, default=None, metavar="SECONDS",
                    help="how long the pre-flight waits for apt's lock")
    up.add_argument("--drain-wait", type=float, default=None, metavar="SECONDS",
                    help="how long the configure waits for the jobs on hosts leaving the "
                    "cluster (drained first) before refusing; default 0")
    _add_become_password(up)
    up.add_argument("--no-configure", action="store_true")
    up.add_argument("--no-verify", action="store_true")
    up.set_defaults(func=cmd_up)


def _add_topology(sub: _Commands) -> None:
    """``topology discover|from-file``: topology.conf from the InfiniBand fabric."""
    topo = sub.add_parser("topology", help="Slurm's topology.conf from the InfiniBand fabric")
    topo_sub = topo.add_subparsers(dest="topology_command", required=True)
    disc = topo_sub.add_parser(
        "discover", help="run ibnetdiscover on the cluster and update topology.conf",
        description="Runs the slurm_topology role on the controller (Ansible --tags topology): "
        "ibnetdiscover on the discovery host, the tree written to topology.conf, Slurm "
        "reconfigured only when the file changed. Nodes the fabric misses are named and keep "
        "their place.")
    disc.add_argument("-i", "--inventory", required=True, type=Path)
    disc.add_argument("--check", action="store_true", help="show what would change")
    disc.set_defaults(func=cmd_topology_discover)
    gen = topo_sub.add_parser(
        "from-file", help="print topology.conf for a saved ibnetdiscover output",
        description="Reads an ibnetdiscover output (e.g. 'ibnetdiscover > fabric.txt' on any "
        "host of the fabric) and prints the topology.conf metalslurm would write; what does "
        "not fit (hosts no compute node matches, nodes not in the fabric) goes to stderr.")
    gen.add_argument("ibnetdiscover", type=Path, metavar="IBNETDISCOVER_OUTPUT",
                     help="the saved ibnetdiscover output")
    nodes = gen.add_mutually_exclusive_group(required=True)
    nodes.add_argument("-i", "--inventory", type=Path, help="the compute nodes of this inventory")
    nodes.add_argument("--nodes", help="the compute nodes as a hostlist (gpu-[001-064])")
    gen.add_argument("--previous", type=Path, help="the topology.conf in use (places nodes "
                     "the fabric misses)")
    gen.add_argument("--plugin", choices=("tree", "block"), default="tree")
    gen.set_defaults(func=cmd_topology_from_file)


def _add_config(sub: _Commands) -> None:
    """``config validate``: check a stack config file."""
    config = sub.add_parser("config", help="stack config tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    validate = config_sub.add_parser("validate", help="check a stack config file")
    validate.add_argument("stack_file", type=Path, metavar="STACK_FILE")
    validate.set_defaults(func=cmd_config_validate)


def _add_wheelhouse(sub: _Commands) -> None:
    """``wheelhouse``: the pinned wheels nodes install offline."""
    wh = sub.add_parser(
        "wheelhouse", help="download the pinned wheels nodes install offline",
        description="Downloads the wheels of a pinned requirements file (default: the CPU "
        "training examples') for the nodes' Python into DEST, on this machine, for nodes "
        "that cannot reach a package index (PIP_NO_INDEX=1 PIP_FIND_LINKS=DEST).")
    wh.add_argument("--dest", type=Path, required=True, metavar="DIR",
                    help="the wheelhouse directory (made if missing)")
    version = wh.add_mutually_exclusive_group()
    version.add_argument("--python", help="the nodes' Python, such as 3.13 (default: what "
                         "metalslurm:os ships)")
    version.add_argument("--stack", type=Path, default=DEFAULT_STACK,
                         help="take the Python from this stack's metalslurm:os "
                         f"(default {DEFAULT_STACK})")
    wh.add_argument("--requirements", type=Path, default=None,
                    help="pinned requirements (default: "
                    "examples/python/requirements-train-cpu.txt)")
    wh.set_defaults(func=cmd_wheelhouse)


def _add_report(sub: _Commands) -> None:
    """``report usage``: GPU-hours from Slurm accounting."""
    rep = sub.add_parser("report", help="reports from Slurm accounting")
    rep_sub = rep.add_subparsers(dest="report_command", required=True)
    usage = rep_sub.add_parser(
        "usage", help="GPU-hours per user and account from sacct, optionally priced",
        description="GPU-hours per user and account over a time window (default: this month), "
        "from sacct on the controller; with prices, a chargeback table.")
    usage.add_argument("--start", help="window start: YYYY-MM-DD[THH:MM[:SS]], now-7days, "
                       "today (default: the 1st of this month)")
    usage.add_argument("--end", help="window end, same forms (default: now)")
    source = usage.add_mutually_exclusive_group()
    source.add_argument("-i", "--inventory", type=Path,
                        help="run sacct on the inventory's slurm_controller through Ansible")
    source.add_argument("--stack", type=Path,
                        help="run sacct on this local cluster's controller (podman exec)")
    source.add_argument("--from-file", type=Path,
                        help="read recorded output of the sacct command instead")
    usage.add_argument("--price", action="append", default=[], metavar="TYPE=PRICE",
                       help="price per GPU-hour of a GPU type (h100=4.21); 'default=PRICE' "
                       "for GPUs without a type; repeatable")
    usage.add_argument("--prices", type=Path, metavar="FILE",
                       help="YAML mapping of GPU type to price per GPU-hour")
    usage.add_argument("--csv", action="store_true", help="CSV instead of a text table")
    usage.set_defaults(func=cmd_report_usage)


def _add_accept(sub: _Commands) -> None:
    """``accept`` and ``accept report``: the acceptance gate."""
    acc = sub.add_parser(
        "accept", help="the acceptance gate: nodes prove GPUs and fabric before taking jobs",
        description="Test nodes in a maintenance reservation (dcgmi diag, NCCL all_reduce on "
        "one node and across pairs, ib_write_bw per HCA port), judge the figures against the "
        "floors and the fleet's history, drain the failing nodes with 'metalslurm-accept:' "
        "and the figure, return the others. Without --nodes: the nodes drained with that "
        "prefix. Exit 1 when a node failed.")
    acc.add_argument("-i", "--inventory", type=Path,
                     help="the cluster's inventory (.metalslurm/<stack>/inventory.yml)")
    acc.add_argument("--nodes", help="a hostlist of compute nodes (gpu-[001-004])")
    acc.add_argument("--level", help="quick (dcgmi diag -r 2, the default) or full (-r 3)")
    acc.add_argument("--html", type=Path, help="where to write the report page (default: "
                     "accept/<run>.html beside the inventory)")
    acc.set_defaults(func=cmd_accept)
    acc_sub = acc.add_subparsers(dest="accept_command")
    acc_rep = acc_sub.add_parser("report", help="a run's table and HTML page from the history")
    acc_rep.add_argument("-i", "--inventory", type=Path, required=True)
    acc_rep.add_argument("--run", help="the run (default: the last)")
    acc_rep.add_argument("--html", type=Path, help="where to write the page")
    acc_rep.set_defaults(func=cmd_accept_report)


def cmd_maintain(args: argparse.Namespace) -> int:
    from infra.ops.maintain import run_maintain

    return run_maintain(args.inventory, nodes=args.nodes, reboot=args.reboot,
                        batch=args.batch, max_wait=args.max_wait, update=args.update, log=say)


def _add_maintain(sub: _Commands) -> None:
    """``maintain --reboot`` / ``--update``: rolling reboots and package updates that kill
    no job."""
    main = sub.add_parser(
        "maintain", help="rolling reboots and package updates of compute nodes, running jobs "
        "finishing first",
        description="Reboot compute nodes through Slurm ('scontrol reboot ASAP "
        "nextstate=DOWN'): each takes no new job, its running jobs end, it reboots and "
        "registers DOWN; its health checker runs over SSH and only a passing node is resumed "
        "(with the acceptance gate on: drained into the gate). At most --batch nodes out at "
        "once, idle nodes first. Stopped half-way, a run again with the same nodes goes on "
        "where each node was. With --update each node is drained, its running jobs end, and "
        "the newer builds its apt sources offer of the packages kept from "
        "unattended-upgrades (Slurm, munge, PMIx, Enroot, NVIDIA), of its held ones and of "
        "munge's and Slurm's are installed (checked on every node before any is drained); then its "
        "reboot, or munge and slurmd restarted, the health check and the return. Exit 1 when "
        "a node failed or was not rebooted or updated (--max-wait).")
    main.add_argument("-i", "--inventory", type=Path,
                      help="the cluster's inventory (.metalslurm/<stack>/inventory.yml)")
    main.add_argument("--nodes", required=True,
                      help="a hostlist of compute nodes (gpu-[001-004])")
    main.add_argument("--reboot", action="store_true", help="reboot them")
    main.add_argument("--update", action="store_true",
                      help="install the newer builds of the packages kept from "
                      "unattended-upgrades and of held ones first")
    main.add_argument("--batch", default="1", metavar="N|P%",
                      help="nodes out of service at once, or a share of the nodes given "
                      "(25%%: a quarter of them, at least 1; default 1)")
    main.add_argument("--max-wait", type=float, default=None, metavar="SECONDS",
                      help="how long a node may wait for its running jobs once its reboot (or "
                      "update) is asked for; past it the reboot (update) is called off and "
                      "the node returns to service as it was (default: as long as they run; "
                      "0: busy nodes are left alone)")
    main.set_defaults(func=cmd_maintain)


def cmd_backup(args: argparse.Namespace) -> int:
    from infra.ops.backup import run_backup

    return run_backup(args.inventory, args.dir, log=say)


def cmd_restore(args: argparse.Namespace) -> int:
    from infra.ops.backup import run_restore

    return run_restore(args.inventory, args.dir, log=say, force=args.force)


def _add_backup(sub: _Commands) -> None:
    """``backup`` and ``restore``: the accounting database and slurmctld's state."""
    back = sub.add_parser(
        "backup", help="the accounting database and slurmctld's state, to restore onto a "
        "controller made anew",
        description="Stop slurmctld for a moment (running jobs go on), dump the accounting "
        "database (mysqldump --single-transaction) and archive slurmctld's StateSaveLocation "
        "while it is stopped, so the two agree; start it again. Writes DIR (0700, files "
        "0600): the dump, the archive, a copy of the inventory and a manifest with each "
        "file's SHA-256 and a listing of the secret files (never their contents). DIR must "
        "be new or empty.")
    back.add_argument("-i", "--inventory", type=Path,
                      help="the cluster's inventory (.metalslurm/<stack>/inventory.yml)")
    back.add_argument("dir", type=Path, metavar="DIR", help="where the backup goes")
    back.set_defaults(func=cmd_backup)
    rest = sub.add_parser(
        "restore", help="a backup onto the cluster's controller (one made anew by 'up')",
        description="Check the backup (each file's SHA-256, an archive of plain files only), "
        "then the controller (the same cluster name, a Slurm release not older than the "
        "backup's, an empty queue); stop slurmctld and slurmdbd, load the database, put the "
        "state in place (the replaced one kept beside it), start them again.")
    rest.add_argument("-i", "--inventory", type=Path,
                      help="the cluster's inventory (.metalslurm/<stack>/inventory.yml)")
    rest.add_argument("dir", type=Path, metavar="DIR", help="a directory 'metalslurm "
                      "backup' wrote")
    rest.add_argument("--force", action="store_true",
                      help="restore even though the controller's queue holds jobs (they are "
                      "replaced by the backup's)")
    rest.set_defaults(func=cmd_restore)


def build_parser() -> argparse.ArgumentParser:
    """The ``metalslurm`` command line: one subcommand per operator task."""
    parser = _Parser(prog="metalslurm", description="metalslurm: the operator command line")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_local(sub)
    _add_image(sub)
    _add_configure(sub)
    _add_verify(sub)
    _add_preflight(sub)
    _add_up(sub)
    _add_topology(sub)
    _add_config(sub)
    _add_wheelhouse(sub)
    _add_report(sub)
    _add_accept(sub)
    _add_maintain(sub)
    _add_backup(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except InputError as exc:  # bad input (a stack config's problems too): nothing was done
        error(str(exc))
        return EXIT_INPUT
    except InventoryError as exc:  # the inventory a stack config made breaks the contract
        error(str(exc))
        return EXIT_INPUT
    except (RecursionError, NotImplementedError):
        raise  # RuntimeErrors that are bugs: their traceback is the report
    except RuntimeError as exc:  # provider, podman and image errors carry a usable message
        error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        error("interrupted; every step is safe to run again")
        return 130
    except BrokenPipeError:  # 'metalslurm report usage | head': the reader has what it wanted
        # Python flushes stdout again at exit; point it at /dev/null so that is silent too.
        with contextlib.suppress(OSError, ValueError):  # stdout is not a file (a capture)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
