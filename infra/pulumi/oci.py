"""The oci provider: OCI bare-metal GPU shapes (BM.GPU.H100.8 and kin) in an RDMA network.

Network: one VCN; one private subnet (``metalslurm:privateCidr``, no public addresses)
for every cluster node, with egress through a NAT gateway; one public subnet holding
only the bastion. Security lists allow all traffic inside the private subnet (Slurm,
NFS, SSH, and the srun/NCCL ports jobs open), SSH into it from the bastion subnet, and
SSH into the bastion only from ``metalslurm:oci.adminCidr``: the bastion is the only
ingress.

Machines: controller (also slurmdbd), NFS server and login nodes (``metalslurm:login``,
users reach them through the bastion) on CPU shapes; static GPU nodes
launched into an OCI *compute cluster* (the RDMA cluster network for individually
launched bare-metal instances, so every node keeps its name and a fixed private
address). Elastic nodes are not launched here: their ``metalslurm_power`` mapping
holds everything the oci power driver needs to launch them into the same compute
cluster with the same address (``launch-terminate``), or, with ``elasticMode:
start-stop``, they are created now, stopped, and the driver starts and stops them.

A launched machine lets in the operator's key and the cluster's join key (its login user's
``authorized_keys``, through the launch metadata): the controller configures it with the
join key (infra/stack/join_kit.py). The join key is made from a random password Pulumi
keeps as a secret in the stack's state, so every operator of the stack has the same one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import partial
from typing import Any

import pulumi
import pulumi_random as random
from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import (
    LAUNCH_TERMINATE,
    START_STOP,
)

from infra.pulumi.machines import ClusterArgs, Machines
from infra.stack.config import ClusterConfig
from infra.stack.inventory import BACKUP_GROUP, NodeSpec, backup_controller_specs, login_specs
from infra.stack.join_kit import ed25519_key_pair
from infra.stack.oci import OciSettings
from infra.stack.schema import ConfigError, key

CONTROLLER_HOST_INDEX = 10  # controller at <subnet>.10, NFS .11, compute nodes from .12
FLEX_OCPUS = 8
FLEX_MEMORY_GBS = 64
ALL_PROTOCOLS = "all"
TCP = "6"
JOIN_SEED_CHARS = 64  # of [A-Za-z0-9]: 381 bits, hashed into the Ed25519 seed


def _settings(cfg: ClusterConfig) -> OciSettings:
    if cfg.oci is None:
        raise ValueError("provider oci needs metalslurm:oci")
    return cfg.oci


def node_specs(cfg: ClusterConfig) -> list[NodeSpec]:
    """Every node with its planned private address; elastic nodes' power is filled later."""
    hosts = list(cfg.private_cidr.hosts())
    index = CONTROLLER_HOST_INDEX - 1
    specs = [NodeSpec(name=cfg.controller_name, address=str(hosts[index]),
                      groups=("slurm_controller", "slurmdbd"))]
    if cfg.storage.backend == "nfs":
        index += 1
        specs.append(NodeSpec(name=cfg.storage.server, address=str(hosts[index]),
                              groups=("nfs_server",)))
    for pool in cfg.compute_pools:
        elastic = set(pool.elastic_names())
        for node in pool.node_names():
            index += 1
            specs.append(NodeSpec(name=node, address=str(hosts[index]), groups=("slurm_compute",),
                                  gpu_type=pool.gpu_type, gpu_count=pool.gpu_count,
                                  node_state="cloud" if node in elastic else "static"))
    return specs + login_specs(cfg) + backup_controller_specs(cfg, CONTROLLER_HOST_INDEX)


def _flex_config(shape: str) -> dict[str, int] | None:
    """A flexible shape's OCPUs and memory (every instance of one gets the same), else None."""
    return ({"ocpus": FLEX_OCPUS, "memory_in_gbs": FLEX_MEMORY_GBS}
            if shape.endswith(".Flex") else None)


def _with_ids(common: dict[str, Any], names: tuple[str, ...],
              ids: list[Any]) -> dict[str, Any]:
    return {**common, **dict(zip(names, ids, strict=True))}


def _launched(common: dict[str, Any], operator_key: str,
              values: list[Any]) -> dict[str, Any]:
    """A launch-terminate node's power mapping: ``values`` = (subnet id, compute cluster id,
    join key's ``authorized_keys`` line)."""
    subnet_id, cluster_id, join_public = values
    keys = "\n".join(line for line in (*operator_key.strip().splitlines(), join_public) if line)
    return {**common, "subnet_id": subnet_id, "compute_cluster_id": cluster_id,
            "metadata": {"ssh_authorized_keys": keys}}


def join_key_pair(seed: str, cluster: str) -> tuple[str, str]:
    """(private key file, ``authorized_keys`` line) of the cluster's join key, made from the
    random ``seed`` text Pulumi keeps as a secret."""
    return ed25519_key_pair(hashlib.sha256(seed.encode()).digest(), f"metalslurm-join-{cluster}")


def join_key_outputs(seed: pulumi.Output[str],
                     cluster: str) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
    """(private key, public line) of the join key as Outputs: the private one secret, the
    public one plain (the inventory, a plain output, holds it) even though it is made from
    a secret."""
    pair = seed.apply(partial(join_key_pair, cluster=cluster))
    return (pulumi.Output.secret(pair.apply(lambda p: p[0])),
            pulumi.Output.unsecret(pair.apply(lambda p: p[1])))


@dataclass(frozen=True)
class _Network:
    """What the nodes are launched into: the two subnets and the RDMA compute cluster."""

    private: Any  # oci.core.Subnet: every cluster node
    public: Any  # oci.core.Subnet: the bastion only
    compute_cluster: Any  # oci.core.ComputeCluster: the static and elastic GPU nodes


class _Launcher:
    """Creates the cluster's OCI resources, each a child of the cluster with its tags."""

    def __init__(self, name: str, cfg: ClusterConfig, parent: pulumi.Resource) -> None:
        import pulumi_oci

        self.oci = pulumi_oci
        self.name = name
        self.cfg = cfg
        self.o = _settings(cfg)
        self.child = pulumi.ResourceOptions(parent=parent)
        self.tags = {"metalslurm-cluster": cfg.cluster_name}

    def _security_lists(self, vcn: Any) -> tuple[Any, Any]:
        """(private, bastion) security lists: all traffic inside the private subnet and SSH
        from the bastion into it; SSH into the bastion from the admin network only."""
        core, o, cfg, name = self.oci.core, self.o, self.cfg, self.name
        egress_all = [core.SecurityListEgressSecurityRuleArgs(
            destination="0.0.0.0/0", protocol=ALL_PROTOCOLS)]
        private_sl = core.SecurityList(
            f"{name}-private-sl", compartment_id=o.compartment_id, vcn_id=vcn.id,
            ingress_security_rules=[
                core.SecurityListIngressSecurityRuleArgs(
                    protocol=ALL_PROTOCOLS, source=str(cfg.private_cidr),
                    description="inside the cluster: Slurm, NFS, SSH, srun and NCCL ports"),
                core.SecurityListIngressSecurityRuleArgs(
                    protocol=TCP, source=str(o.bastion_subnet_cidr),
                    tcp_options=core.SecurityListIngressSecurityRuleTcpOptionsArgs(min=22,
                                                                                   max=22),
                    description="SSH from the bastion"),
            ],
            egress_security_rules=egress_all, freeform_tags=self.tags, opts=self.child)
        bastion_sl = core.SecurityList(
            f"{name}-bastion-sl", compartment_id=o.compartment_id, vcn_id=vcn.id,
            ingress_security_rules=[core.SecurityListIngressSecurityRuleArgs(
                protocol=TCP, source=str(o.admin_cidr),
                tcp_options=core.SecurityListIngressSecurityRuleTcpOptionsArgs(min=22, max=22),
                description="SSH from the admin network")],
            egress_security_rules=egress_all, freeform_tags=self.tags, opts=self.child)
        return private_sl, bastion_sl

    def network(self) -> _Network:
        """The VCN, its gateways, route tables, security lists and subnets, and the compute
        cluster (see the module documentation)."""
        core, o, cfg, name = self.oci.core, self.o, self.cfg, self.name
        tags, child = self.tags, self.child
        vcn = core.Vcn(f"{name}-vcn", compartment_id=o.compartment_id,
                       cidr_blocks=[str(o.vcn_cidr)], display_name=f"{cfg.cluster_name}-vcn",
                       dns_label=cfg.cluster_name.replace("-", "")[:15],
                       freeform_tags=tags, opts=child)
        nat = core.NatGateway(f"{name}-nat", compartment_id=o.compartment_id, vcn_id=vcn.id,
                              display_name=f"{cfg.cluster_name}-nat", freeform_tags=tags,
                              opts=child)
        igw = core.InternetGateway(f"{name}-igw", compartment_id=o.compartment_id,
                                   vcn_id=vcn.id, enabled=True, freeform_tags=tags,
                                   display_name=f"{cfg.cluster_name}-igw", opts=child)
        private_rt = core.RouteTable(
            f"{name}-private-rt", compartment_id=o.compartment_id, vcn_id=vcn.id,
            route_rules=[core.RouteTableRouteRuleArgs(
                network_entity_id=nat.id, destination="0.0.0.0/0",
                destination_type="CIDR_BLOCK")],
            freeform_tags=tags, opts=child)
        public_rt = core.RouteTable(
            f"{name}-bastion-rt", compartment_id=o.compartment_id, vcn_id=vcn.id,
            route_rules=[core.RouteTableRouteRuleArgs(
                network_entity_id=igw.id, destination="0.0.0.0/0",
                destination_type="CIDR_BLOCK")],
            freeform_tags=tags, opts=child)
        private_sl, bastion_sl = self._security_lists(vcn)
        private = core.Subnet(
            f"{name}-private", compartment_id=o.compartment_id, vcn_id=vcn.id,
            cidr_block=str(cfg.private_cidr), prohibit_public_ip_on_vnic=True,
            prohibit_internet_ingress=True, route_table_id=private_rt.id,
            security_list_ids=[private_sl.id], dns_label="private",
            display_name=f"{cfg.cluster_name}-private", freeform_tags=tags, opts=child)
        public = core.Subnet(
            f"{name}-bastion-subnet", compartment_id=o.compartment_id, vcn_id=vcn.id,
            cidr_block=str(o.bastion_subnet_cidr), prohibit_public_ip_on_vnic=False,
            route_table_id=public_rt.id, security_list_ids=[bastion_sl.id],
            dns_label="bastion", display_name=f"{cfg.cluster_name}-bastion",
            freeform_tags=tags, opts=child)
        compute_cluster = core.ComputeCluster(
            f"{name}-rdma", compartment_id=o.compartment_id,
            availability_domain=o.availability_domain, display_name=f"{cfg.cluster_name}-rdma",
            freeform_tags=tags, opts=child)
        return _Network(private, public, compute_cluster)

    def display_name(self, host: str) -> str:
        return f"{self.cfg.cluster_name}-{host}"

    def instance_tags(self, role: str, host: str) -> dict[str, str]:
        return {**self.tags, "metalslurm-role": role, "metalslurm-node": host}

    def instance(self, host: str, shape: str, subnet: Any, role: str,
                 private_ip: str | None, public_ip: bool, cluster_id: Any = None,
                 state: str | None = None) -> Any:
        """An instance named ``<cluster>-<host>`` booted from the stack's image."""
        core, o = self.oci.core, self.o
        flex = _flex_config(shape)
        return core.Instance(
            f"{self.name}-{host}", compartment_id=o.compartment_id,
            availability_domain=o.availability_domain, shape=shape,
            shape_config=core.InstanceShapeConfigArgs(**flex) if flex else None,
            display_name=self.display_name(host),
            source_details=core.InstanceSourceDetailsArgs(
                source_type="image", source_id=o.image_id,
                boot_volume_size_in_gbs=str(o.boot_volume_gbs)),
            create_vnic_details=core.InstanceCreateVnicDetailsArgs(
                subnet_id=subnet.id, assign_public_ip="true" if public_ip else "false",
                private_ip=private_ip, hostname_label=host),
            compute_cluster_id=cluster_id, metadata={"ssh_authorized_keys": o.ssh_public_key},
            state=state, freeform_tags=self.instance_tags(role, host),
            # A start-stop node is created stopped; afterwards its state is the power
            # driver's: a 'pulumi up --refresh' must not stop a node Slurm resumed for a job.
            opts=self.child if state is None else pulumi.ResourceOptions.merge(
                self.child, pulumi.ResourceOptions(ignore_changes=["state"])))

    def compute_node(self, spec: NodeSpec, net: _Network,
                     join_public: pulumi.Output[str] | None) -> Any:
        """A compute node: a static one launched into the compute cluster; an elastic one
        created stopped (start-stop) or not at all (launch-terminate: the driver launches it
        at its planned address, letting in ``join_public`` besides the operator's key).
        Returns an elastic node's ``metalslurm_power`` mapping (an Output), None for a
        static node."""
        o = self.o
        shape = compute_shape(self.cfg, spec.name)
        common: dict[str, Any] = {"driver": "oci", "mode": o.elastic_mode,
                                  "compartment_id": o.compartment_id,
                                  "availability_domain": o.availability_domain,
                                  "shape": shape, "region": o.region}
        if spec.node_state == "static":
            self.instance(spec.name, shape, net.private, "compute", spec.address, False,
                          net.compute_cluster.id)
            return None
        if o.elastic_mode == START_STOP:
            inst = self.instance(spec.name, shape, net.private, "compute-elastic", spec.address,
                                 False, net.compute_cluster.id, state="STOPPED")
            return pulumi.Output.all(inst.id).apply(
                partial(_with_ids, common, ("instance_id",)))
        if join_public is None:
            raise ValueError(f"{spec.name}: a launch-terminate node needs the join key")
        # Named and tagged as the instances made here are, so that the driver finds only
        # this cluster's instance of the node; the boot volume and shape as theirs.
        common.update(image_id=o.image_id, private_ip=spec.address, hostname_label=spec.name,
                      display_name=self.display_name(spec.name),
                      freeform_tags=self.instance_tags("compute-elastic", spec.name),
                      boot_volume_gbs=o.boot_volume_gbs)
        if flex := _flex_config(shape):
            common["shape_config"] = flex
        return pulumi.Output.all(net.private.id, net.compute_cluster.id, join_public).apply(
            partial(_launched, common, o.ssh_public_key))


def compute_shape(cfg: ClusterConfig, node: str) -> str:
    """The OCI shape of a compute node: its pool's, which the stack config gives or fills in
    from the pool's GPU type and count; a ConfigError naming the setting if there is none."""
    for i, pool in enumerate(cfg.compute_pools):
        if node in pool.node_names():
            if not pool.shape:
                raise ConfigError([f"{key('computePools')}[{i}].shape: pool {pool.name!r} has "
                                   "no OCI shape; the oci provider launches its nodes with "
                                   "it: set shape"])
            return pool.shape
    raise ConfigError([f"{key('computePools')}: no pool has the node {node!r}"])


def oci_machines(name: str, args: ClusterArgs, parent: pulumi.Resource) -> Machines:
    """The oci provider's machines: the network, a bastion, the controller, NFS server,
    login and static compute nodes, and each elastic node's power mapping."""
    cfg = args.config
    launch = _Launcher(name, cfg, parent)
    o = launch.o
    specs = node_specs(cfg)
    net = launch.network()
    bastion = launch.instance("bastion", o.bastion_shape, net.public, "bastion", None, True)
    power: dict[str, Any] = {}
    join_private: pulumi.Output[str] | None = None
    join_public: pulumi.Output[str] | None = None
    if o.elastic_mode == LAUNCH_TERMINATE and any(s.node_state == "cloud" for s in specs):
        # A RandomPassword, not RandomBytes: pulumi-random makes a RandomBytes' value its
        # resource ID, which Pulumi cannot keep secret (a password's ID is "none").
        seed = random.RandomPassword(f"{name}-join-key", length=JOIN_SEED_CHARS, special=False,
                                     opts=launch.child)
        join_private, join_public = join_key_outputs(seed.result, cfg.cluster_name)
    for spec in specs:
        if "slurm_controller" in spec.groups or BACKUP_GROUP in spec.groups:
            launch.instance(spec.name, o.controller_shape, net.private, "controller",
                            spec.address, False)
        elif "nfs_server" in spec.groups:
            launch.instance(spec.name, o.nfs_shape, net.private, "nfs", spec.address, False)
        elif "login" in spec.groups:
            launch.instance(spec.name, cfg.login.shape, net.private, "login", spec.address,
                            False)
        elif (node_power := launch.compute_node(spec, net, join_public)) is not None:
            power[spec.name] = node_power
    ctl = specs[0]
    hint = bastion.public_ip.apply(
        lambda ip: f"ssh -J {o.ssh_user}@{ip} {o.ssh_user}@{ctl.address}")
    connection = bastion.public_ip.apply(lambda ip: {
        "ansible_user": o.ssh_user, "ansible_become": o.ssh_user != "root",
        "ansible_ssh_common_args": (f"-o ProxyJump={o.ssh_user}@{ip} "
                                    "-o StrictHostKeyChecking=accept-new")})
    return Machines(
        specs=specs, connection_vars=connection,
        controller_address=pulumi.Output.from_input(ctl.address),
        bastion_address=bastion.public_ip, ssh_hint=hint,
        power=pulumi.Output.from_input(power) if power else pulumi.Output.from_input({}),
        join_key=join_private,
    )
