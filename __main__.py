"""metalslurm Pulumi program.

Reads the stack config with the same parser as ``metalslurm local up`` and exports the
node plan and the Ansible inventory for the configure step. Provider resources (the
Cluster component for local podman nodes, bring-your-own bare metal and OCI bare-metal
H100) are separate, planned work and are not created by this program yet.
"""

import pulumi

from infra.config import NAMESPACE, parse_config
from infra.inventory import build_inventory, cluster_vars
from infra.providers.local import node_specs

OBJECT_KEYS = ("controller", "computePools", "partitions", "slurmConf", "local")
STRING_KEYS = ("clusterName", "provider", "privateCidr", "os")

_config = pulumi.Config(NAMESPACE)
_raw = {f"{NAMESPACE}:{k}": _config.get_object(k) for k in OBJECT_KEYS if _config.get(k)}
_raw.update({f"{NAMESPACE}:{k}": _config.get(k) for k in STRING_KEYS if _config.get(k)})
cluster_config = parse_config(_raw, source=f"stack {pulumi.get_stack()}")
specs = node_specs(cluster_config)

pulumi.export("nodes", [{"name": s.name, "address": s.address, "groups": list(s.groups)}
                        for s in specs])
pulumi.export("inventory", build_inventory(specs, cluster_vars(cluster_config, specs)))
