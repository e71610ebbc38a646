"""Plain-Python provider machinery (no Pulumi): podman, images, the local cluster, host CAs."""
