"""Stack config of the oci provider: the network plan, shapes and image of an OCI cluster.

``metalslurm:oci`` gives the region, compartment, availability domain, the image every
node boots (``imageId``), the VCN and bastion subnet around ``metalslurm:privateCidr``,
and the shapes. GPU pools get their bare-metal shape from their GPU type and count
(``BM.GPU.H100.8`` for 8 x h100) unless they name one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ansible_collections.metalslurm.cluster.plugins.module_utils.elastic import ELASTIC_MODES

from infra.stack.schema import USER_NAME_RE, Collector, key

if TYPE_CHECKING:
    from infra.stack.cluster_types import ComputePool

# OCI bare-metal GPU shapes: (GPU type, GPUs per node). CPU shapes (VM./BM.Standard...)
# have no GPUs.
OCI_GPU_SHAPES: dict[str, tuple[str, int]] = {
    "BM.GPU.H100.8": ("h100", 8),
    "BM.GPU.H200.8": ("h200", 8),
    "BM.GPU.B200.8": ("b200", 8),
    "BM.GPU.A100-v2.8": ("a100", 8),
    "BM.GPU4.8": ("a100", 8),
    "BM.GPU.A10.4": ("a10", 4),
    "BM.GPU.L40S.4": ("l40s", 4),
}
OCI_CPU_SHAPE_RE = re.compile(r"^(VM|BM)\.Standard[A-Za-z0-9.]*$")
OCID_RE = re.compile(r"^ocid1\.[a-z0-9]+\.[a-z0-9-]*\.[a-z0-9-]*\.[a-z0-9]+$")
OCI_REGION_RE = re.compile(r"^[a-z]{2}-[a-z]+-\d$")
# An OpenSSH public key line: type, base64 key, optional comment.
SSH_PUBLIC_KEY_RE = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-\S+) [A-Za-z0-9+/=]+( [^\n]*)?")
_OCI_KEYS = ("region", "compartmentId", "availabilityDomain", "imageId", "vcnCidr",
             "bastionSubnetCidr", "adminCidr", "sshUser", "sshPublicKey", "controllerShape",
             "nfsShape", "bastionShape", "elasticMode", "bootVolumeGbs")
DEFAULT_CPU_SHAPE = "VM.Standard.E5.Flex"


@dataclass(frozen=True)
class OciSettings:
    region: str
    compartment_id: str
    availability_domain: str
    image_id: str
    vcn_cidr: ipaddress.IPv4Network
    bastion_subnet_cidr: ipaddress.IPv4Network
    admin_cidr: ipaddress.IPv4Network
    ssh_public_key: str
    ssh_user: str = "ubuntu"
    controller_shape: str = DEFAULT_CPU_SHAPE
    nfs_shape: str = DEFAULT_CPU_SHAPE
    bastion_shape: str = DEFAULT_CPU_SHAPE
    elastic_mode: str = "launch-terminate"
    boot_volume_gbs: int = 200


def oci_shape_gpus(shape: str) -> tuple[str | None, int] | None:
    """(GPU type, count) of an OCI shape metalslurm knows, else None."""
    if shape in OCI_GPU_SHAPES:
        return OCI_GPU_SHAPES[shape]
    if OCI_CPU_SHAPE_RE.match(shape):
        return None, 0
    return None


def _network(c: Collector, item: Mapping[str, Any], name: str, where: str,
             private: bool = True) -> ipaddress.IPv4Network | None:
    value = c.string(item, name, where)
    if value is None:
        return None
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        c.problem(where, f"{value!r} is not a valid network in CIDR notation ({exc})")
        return None
    if not isinstance(net, ipaddress.IPv4Network):
        c.problem(where, f"{value!r} must be an IPv4 network")
        return None
    if private and not net.is_private:
        c.problem(where, f"{value!r} is not a private range")
        return None
    return net


def _check_networks(c: Collector, cidr: ipaddress.IPv4Network | None,
                    vcn: ipaddress.IPv4Network | None, bastion: ipaddress.IPv4Network | None,
                    admin: ipaddress.IPv4Network | None) -> None:
    where = key("oci")
    if vcn is not None and vcn.prefixlen < 16:
        c.problem(f"{where}.vcnCidr", f"{vcn} is larger than OCI allows for a VCN (/16 at most)")
    if vcn is not None and cidr is not None and not cidr.subnet_of(vcn):
        c.problem(f"{where}.vcnCidr", f"{vcn} does not contain {key('privateCidr')} {cidr}: the "
                  "private subnet must be inside the VCN")
    if bastion is not None:
        if vcn is not None and not bastion.subnet_of(vcn):
            c.problem(f"{where}.bastionSubnetCidr", f"{bastion} is not inside "
                      f"{where}.vcnCidr {vcn}")
        if cidr is not None and bastion.overlaps(cidr):
            c.problem(f"{where}.bastionSubnetCidr", f"{bastion} overlaps {key('privateCidr')} "
                      f"{cidr}: the bastion's public subnet must be separate from the private one")
        if bastion.prefixlen > 29:
            c.problem(f"{where}.bastionSubnetCidr", f"{bastion} is too small: use a /29 or "
                      "larger")
    if admin is not None:
        if admin.prefixlen == 0:
            c.problem(f"{where}.adminCidr", "0.0.0.0/0 would open SSH to the whole internet; "
                      "give your office or VPN range")
        elif vcn is not None and admin.overlaps(vcn):
            c.problem(f"{where}.adminCidr", f"{admin} overlaps {where}.vcnCidr {vcn}: it is "
                      "where operators connect from, outside the VCN")


def _pool_shapes(c: Collector, pools: Sequence[ComputePool]) -> dict[str, str]:
    """Each pool's shape: the one it names, or the GPU shape with its GPU type and count."""
    shapes = {}
    for i, pool in enumerate(pools):
        pkey = f"{key('computePools')}[{i}]"
        shape = pool.shape or next((s for s, g in OCI_GPU_SHAPES.items()
                                    if g == (pool.gpu_type, pool.gpu_count)), None)
        if shape is None:
            c.problem(f"{pkey}.shape", f"no OCI shape has {pool.gpu_count} x {pool.gpu_type}; "
                      f"set shape (GPU shapes: {', '.join(OCI_GPU_SHAPES)})")
            continue
        gpus = oci_shape_gpus(shape)
        if gpus is None:
            c.problem(f"{pkey}.shape", f"{shape!r} is not a shape metalslurm knows: "
                      f"{', '.join(OCI_GPU_SHAPES)} or a VM./BM.Standard CPU shape")
        elif gpus != (pool.gpu_type, pool.gpu_count):
            c.problem(f"{pkey}.gpuCount", f"pool says {pool.gpu_count} x {pool.gpu_type}, but "
                      f"shape {shape} has {gpus[1]} x {gpus[0]}")
        shapes[pool.name] = shape
    return shapes


def parse_oci(c: Collector, raw: Mapping[str, Any], provider: str | None,
              cidr: ipaddress.IPv4Network | None, pools: Sequence[ComputePool],
              secrets: Mapping[str, bool]) -> tuple[OciSettings | None, dict[str, str]]:
    """``metalslurm:oci``; returns the settings and each pool's shape."""
    where = key("oci")
    item = c.provider_section(raw, "oci", provider)
    if item is None:
        return None, {}
    c.unknown_keys(item, _OCI_KEYS, where)
    if not secrets.get("sshPrivateKey", False):
        c.problem(key("sshPrivateKey"), "is required for provider oci (the private half of "
                  f"{where}.sshPublicKey): 'pulumi config set --secret {key('sshPrivateKey')} "
                  "< ~/.ssh/id_ed25519'")
    region = c.string(item, "region", f"{where}.region", pattern=OCI_REGION_RE,
                      what="an OCI region such as eu-frankfurt-1")
    compartment = c.string(item, "compartmentId", f"{where}.compartmentId", pattern=OCID_RE,
                           what="a compartment OCID (ocid1.compartment.oc1..xxxx)")
    ad = c.string(item, "availabilityDomain", f"{where}.availabilityDomain",
                  pattern=re.compile(r"^[A-Za-z0-9]+:[A-Z0-9-]+-AD-\d$"),
                  what="an availability domain such as Uocm:EU-FRANKFURT-1-AD-1")
    image = c.string(item, "imageId", f"{where}.imageId", pattern=OCID_RE,
                     what="an image OCID (ocid1.image.oc1.<region>.xxxx)")
    ssh_user = c.string(item, "sshUser", f"{where}.sshUser", default="ubuntu",
                        pattern=USER_NAME_RE, what="a login name")
    pubkey = c.string(item, "sshPublicKey", f"{where}.sshPublicKey",
                      pattern=SSH_PUBLIC_KEY_RE,
                      what="an OpenSSH public key line")
    shapes = {name: c.string(item, name, f"{where}.{name}", default=DEFAULT_CPU_SHAPE,
                             pattern=OCI_CPU_SHAPE_RE,
                             what="a CPU shape such as VM.Standard.E5.Flex")
              for name in ("controllerShape", "nfsShape", "bastionShape")}
    mode = c.string(item, "elasticMode", f"{where}.elasticMode", default="launch-terminate",
                    choices=ELASTIC_MODES)
    boot = c.integer(item, "bootVolumeGbs", f"{where}.bootVolumeGbs", default=200, minimum=50,
                     maximum=32768)
    vcn = _network(c, item, "vcnCidr", f"{where}.vcnCidr")
    bastion_net = _network(c, item, "bastionSubnetCidr", f"{where}.bastionSubnetCidr")
    admin = _network(c, item, "adminCidr", f"{where}.adminCidr", private=False)
    _check_networks(c, cidr, vcn, bastion_net, admin)
    pool_shapes = _pool_shapes(c, pools)
    if c.problems or None in (region, compartment, ad, image, pubkey, vcn, bastion_net, admin):
        return None, pool_shapes
    assert region and compartment and ad and image and pubkey and vcn and bastion_net and admin
    return OciSettings(
        region=region, compartment_id=compartment, availability_domain=ad, image_id=image,
        vcn_cidr=vcn, bastion_subnet_cidr=bastion_net, admin_cidr=admin,
        ssh_public_key=pubkey, ssh_user=ssh_user or "ubuntu",
        controller_shape=shapes["controllerShape"] or DEFAULT_CPU_SHAPE,
        nfs_shape=shapes["nfsShape"] or DEFAULT_CPU_SHAPE,
        bastion_shape=shapes["bastionShape"] or DEFAULT_CPU_SHAPE,
        elastic_mode=mode or "launch-terminate", boot_volume_gbs=boot or 200), pool_shapes
