"""Repository-wide pytest set-up: every test layer but e2e and verify runs with a podman
stand-in that refuses and records (tests/podman_guard.py): unit tests start no container."""

pytest_plugins = ["tests.podman_guard"]
