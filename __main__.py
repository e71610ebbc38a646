"""metalslurm Pulumi program.

Deploys one Slurm cluster: its private network, a controller (also slurmdbd), an NFS
server and GPU compute pools (static and elastic), on the provider the stack names
(local podman nodes, bring-your-own bare metal, or OCI bare-metal GPU shapes), plus
generated secrets (munge key, slurmdbd password, Slurm JWT key). Exports the Ansible
inventory, the controller and bastion addresses and an SSH hint; with
``metalslurm:configure: true`` it also runs ansible/site.yml on that inventory.
"""

from infra.pulumi.program import main

main()
