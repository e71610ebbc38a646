"""metalslurm: bare-metal GPU servers to a Slurm cluster, as code.

Layers, each a package, imports pointing down only (tests/lint/test_layers.py):

    infra/cli.py      parses the command line and calls the layer below
    infra/ops/        operator commands: local up/down, configure, verify, report, wheelhouse
    infra/accept/     the acceptance gate's runner (runs on nodes through SSH, reads results)
    infra/pulumi/     the Pulumi program and its resources (local, byo, oci)
    infra/providers/  plain-Python machinery: podman, images, the local cluster, host CAs
    infra/stack/      the stack config (one module per section), its inventory and state dir
"""
