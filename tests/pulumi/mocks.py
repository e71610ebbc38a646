"""Run the Pulumi program under ``pulumi.runtime.set_mocks`` and record what it registers; the
example stacks' settings it runs with (shared by tests/pulumi and bench/bench_pulumi.py)."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import yaml

from tests.paths import REPO

PROJECT, STACK = "metalslurm", "test"
# The values of the example stacks' secret settings (their files hold them encrypted).
SECRET_VALUES = {
    "metalslurm:sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nmock\n"
                                "-----END OPENSSH PRIVATE KEY-----\n",
    "metalslurm:bmcCredentials": {"default": {"username": "admin", "password": "pw"}},
}


def example(provider: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plain config, secret config) of Pulumi.example-<provider>.yaml."""
    config = yaml.safe_load((REPO / f"Pulumi.example-{provider}.yaml").read_text())["config"]
    plain = {k: v for k, v in config.items()
             if not (isinstance(v, dict) and "secure" in v)}
    secrets = {k: SECRET_VALUES[k] for k in config if k not in plain}
    return plain, secrets


@dataclass
class Registered:
    urn: str
    typ: str
    name: str
    inputs: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)


class RecordingMocks(pulumi.runtime.Mocks):
    """Records every resource; returns plausible outputs (random bytes, addresses, ids)."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        urn = f"urn:pulumi:{STACK}::{PROJECT}::{args.typ}::{args.name}"
        out = dict(args.inputs)
        self.resources.append(Registered(urn, args.typ, args.name, dict(args.inputs), out))
        seed = hashlib.sha256(args.name.encode()).digest()
        if args.typ == "random:index/randomBytes:RandomBytes":
            length = int(args.inputs["length"])
            data = (seed * (length // 32 + 1))[:length]
            out["base64"] = base64.b64encode(data).decode()
            out["hex"] = data.hex()
        elif args.typ == "random:index/randomPassword:RandomPassword":
            length = int(args.inputs["length"])
            out["result"] = (seed.hex() * (length // 64 + 1))[:length]
        elif args.typ == "command:local:Command":
            out["stdout"] = ("localhost/metalslurm-node:test" if args.name.endswith("-image")
                             else f"{args.name} ssh-ed25519 AAAAmock")
        elif args.typ == "oci:Core/instance:Instance":
            vnic = args.inputs.get("createVnicDetails", {})
            out["privateIp"] = vnic.get("privateIp", "10.1.0.5")
            out["publicIp"] = "203.0.113.7" if vnic.get("assignPublicIp") == "true" else ""
        return f"{args.name}-id", out

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list | None]:
        return {}, None

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.typ == typ]

    def named(self, name: str) -> Registered:
        return next(r for r in self.resources if r.name == name)


@dataclass
class Run:
    mocks: RecordingMocks
    exports: dict[str, Any] = field(default_factory=dict)
    secret_exports: set[str] = field(default_factory=set)


def _encode(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_program(config: dict[str, Any], secrets: dict[str, Any] | None = None) -> Run:
    """Run __main__'s program with this stack config (``metalslurm:*`` keys)."""
    from infra.pulumi import program as pulumi_program

    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=STACK, preview=False)
    values = {k: _encode(v) for k, v in config.items()}
    values.update({k: _encode(v) for k, v in (secrets or {}).items()})
    pulumi.runtime.set_all_config(values, secret_keys=list(secrets or {}))
    run = Run(mocks)
    exported: dict[str, Any] = {}

    def capture(name: str, value: Any) -> None:
        exported[name] = value

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        original = pulumi.export
        pulumi.export = capture
        try:
            pulumi_program.main()
        finally:
            pulumi.export = original
        # Await each export as the engine's stack does (``massage`` then serialize): the value
        # and its secretness. Output.all / from_input would deep-lift every nested dict and
        # list of the 1,000-host inventory into Outputs again, work the engine never does.
        async def collect() -> None:
            for k, v in exported.items():
                out = v if isinstance(v, pulumi.Output) else pulumi.Output.from_input(v)
                run.exports[k] = await out.future()
                if await out.is_secret():
                    run.secret_exports.add(k)

        return pulumi.Output.from_input(collect())

    program()
    return run




SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's wire marker of a secret value


def is_secret_value(value: Any) -> bool:
    return isinstance(value, dict) and SECRET_SIG in value


def unsecret(value: Any) -> Any:
    return value["value"] if is_secret_value(value) else value
