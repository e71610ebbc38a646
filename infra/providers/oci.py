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
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pulumi

from infra.config import ClusterConfig
from infra.inventory import NodeSpec, login_specs
from infra.machines import ClusterArgs, Machines
from infra.providers.oci_config import OciSettings

CONTROLLER_HOST_INDEX = 10  # controller at <subnet>.10, NFS .11, compute nodes from .12
FLEX_OCPUS = 8
FLEX_MEMORY_GBS = 64
ALL_PROTOCOLS = "all"
TCP = "6"


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
    return specs + login_specs(cfg)


def _with_ids(common: dict[str, Any], names: tuple[str, ...],
              ids: list[Any]) -> dict[str, Any]:
    return {**common, **dict(zip(names, ids, strict=True))}


def oci_machines(name: str, args: ClusterArgs, parent: pulumi.Resource) -> Machines:
    import pulumi_oci as oci

    cfg = args.config
    o = _settings(cfg)
    specs = node_specs(cfg)
    child = pulumi.ResourceOptions(parent=parent)
    tags = {"metalslurm-cluster": cfg.cluster_name}

    vcn = oci.core.Vcn(f"{name}-vcn", compartment_id=o.compartment_id,
                       cidr_blocks=[str(o.vcn_cidr)], display_name=f"{cfg.cluster_name}-vcn",
                       dns_label=cfg.cluster_name.replace("-", "")[:15],
                       freeform_tags=tags, opts=child)
    nat = oci.core.NatGateway(f"{name}-nat", compartment_id=o.compartment_id, vcn_id=vcn.id,
                              display_name=f"{cfg.cluster_name}-nat", freeform_tags=tags,
                              opts=child)
    igw = oci.core.InternetGateway(f"{name}-igw", compartment_id=o.compartment_id,
                                   vcn_id=vcn.id, enabled=True, freeform_tags=tags,
                                   display_name=f"{cfg.cluster_name}-igw", opts=child)
    private_rt = oci.core.RouteTable(
        f"{name}-private-rt", compartment_id=o.compartment_id, vcn_id=vcn.id,
        route_rules=[oci.core.RouteTableRouteRuleArgs(
            network_entity_id=nat.id, destination="0.0.0.0/0", destination_type="CIDR_BLOCK")],
        freeform_tags=tags, opts=child)
    public_rt = oci.core.RouteTable(
        f"{name}-bastion-rt", compartment_id=o.compartment_id, vcn_id=vcn.id,
        route_rules=[oci.core.RouteTableRouteRuleArgs(
            network_entity_id=igw.id, destination="0.0.0.0/0", destination_type="CIDR_BLOCK")],
        freeform_tags=tags, opts=child)
    egress_all = [oci.core.SecurityListEgressSecurityRuleArgs(
        destination="0.0.0.0/0", protocol=ALL_PROTOCOLS)]
    private_sl = oci.core.SecurityList(
        f"{name}-private-sl", compartment_id=o.compartment_id, vcn_id=vcn.id,
        ingress_security_rules=[
            oci.core.SecurityListIngressSecurityRuleArgs(
                protocol=ALL_PROTOCOLS, source=str(cfg.private_cidr),
                description="inside the cluster: Slurm, NFS, SSH, srun and NCCL ports"),
            oci.core.SecurityListIngressSecurityRuleArgs(
                protocol=TCP, source=str(o.bastion_subnet_cidr),
                tcp_options=oci.core.SecurityListIngressSecurityRuleTcpOptionsArgs(min=22, max=22),
                description="SSH from the bastion"),
        ],
        egress_security_rules=egress_all, freeform_tags=tags, opts=child)
    bastion_sl = oci.core.SecurityList(
        f"{name}-bastion-sl", compartment_id=o.compartment_id, vcn_id=vcn.id,
        ingress_security_rules=[oci.core.SecurityListIngressSecurityRuleArgs(
            protocol=TCP, source=str(o.admin_cidr),
            tcp_options=oci.core.SecurityListIngressSecurityRuleTcpOptionsArgs(min=22, max=22),
            description="SSH from the admin network")],
        egress_security_rules=egress_all, freeform_tags=tags, opts=child)
    private = oci.core.Subnet(
        f"{name}-private", compartment_id=o.compartment_id, vcn_id=vcn.id,
        cidr_block=str(cfg.private_cidr), prohibit_public_ip_on_vnic=True,
        prohibit_internet_ingress=True, route_table_id=private_rt.id,
        security_list_ids=[private_sl.id], dns_label="private",
        display_name=f"{cfg.cluster_name}-private", freeform_tags=tags, opts=child)
    public = oci.core.Subnet(
        f"{name}-bastion-subnet", compartment_id=o.compartment_id, vcn_id=vcn.id,
        cidr_block=str(o.bastion_subnet_cidr), prohibit_public_ip_on_vnic=False,
        route_table_id=public_rt.id, security_list_ids=[bastion_sl.id], dns_label="bastion",
        display_name=f"{cfg.cluster_name}-bastion", freeform_tags=tags, opts=child)
    compute_cluster = oci.core.ComputeCluster(
        f"{name}-rdma", compartment_id=o.compartment_id,
        availability_domain=o.availability_domain, display_name=f"{cfg.cluster_name}-rdma",
        freeform_tags=tags, opts=child)

    metadata = {"ssh_authorized_keys": o.ssh_public_key}

    def instance(res_name: str, host: str, shape: str, subnet: Any, role: str,
                 private_ip: str | None, public_ip: bool, cluster_id: Any = None,
                 state: str | None = None) -> Any:
        flex = shape.endswith(".Flex")
        return oci.core.Instance(
            res_name, compartment_id=o.compartment_id,
            availability_domain=o.availability_domain, shape=shape,
            shape_config=oci.core.InstanceShapeConfigArgs(
                ocpus=FLEX_OCPUS, memory_in_gbs=FLEX_MEMORY_GBS) if flex else None,
            display_name=f"{cfg.cluster_name}-{host}",
            source_details=oci.core.InstanceSourceDetailsArgs(
                source_type="image", source_id=o.image_id,
                boot_volume_size_in_gbs=str(o.boot_volume_gbs)),
            create_vnic_details=oci.core.InstanceCreateVnicDetailsArgs(
                subnet_id=subnet.id, assign_public_ip="true" if public_ip else "false",
                private_ip=private_ip, hostname_label=host),
            compute_cluster_id=cluster_id, metadata=metadata, state=state,
            freeform_tags={**tags, "metalslurm-role": role, "metalslurm-node": host},
            opts=child)

    bastion = instance(f"{name}-bastion", "bastion", o.bastion_shape, public, "bastion", None,
                       True)
    pool_of = {n: p for p in cfg.compute_pools for n in p.node_names()}
    power: dict[str, Any] = {}
    for spec in specs:
        if "slurm_controller" in spec.groups:
            instance(f"{name}-{spec.name}", spec.name, o.controller_shape, private,
                     "controller", spec.address, False)
        elif "nfs_server" in spec.groups:
            instance(f"{name}-{spec.name}", spec.name, o.nfs_shape, private, "nfs",
                     spec.address, False)
        elif "login" in spec.groups:
            instance(f"{name}-{spec.name}", spec.name, cfg.login.shape, private, "login",
                     spec.address, False)
        else:
            pool = pool_of[spec.name]
            assert pool.shape
            common = {"driver": "oci", "mode": o.elastic_mode,
                      "compartment_id": o.compartment_id,
                      "availability_domain": o.availability_domain, "shape": pool.shape,
                      "region": o.region}
            if spec.node_state == "static":
                instance(f"{name}-{spec.name}", spec.name, pool.shape, private, "compute",
                         spec.address, False, compute_cluster.id)
            elif o.elastic_mode == "start-stop":
                inst = instance(f"{name}-{spec.name}", spec.name, pool.shape, private,
                                "compute-elastic", spec.address, False, compute_cluster.id,
                                state="STOPPED")
                power[spec.name] = pulumi.Output.all(inst.id).apply(
                    partial(_with_ids, common, ("instance_id",)))
            else:
                common["image_id"] = o.image_id
                power[spec.name] = pulumi.Output.all(private.id, compute_cluster.id).apply(
                    partial(_with_ids, common, ("subnet_id", "compute_cluster_id")))
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
    )
