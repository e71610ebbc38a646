"""oci: Oracle Cloud compute instances through the oci SDK, in one of two modes.

- ``start-stop`` (default): the node is one instance (``instance_id``) that is started
  (instance_action START) and stopped (SOFTSTOP; STOP when forced). Its address does not change.
- ``launch-terminate``: the node's instance is launched on resume (``compartment_id``,
  ``availability_domain``, ``shape``, ``image_id``, ``subnet_id``, optional ``display_name``
  (default: the node's name), ``freeform_tags``, ``boot_volume_gbs``, ``private_ip``,
  ``hostname_label``, ``compute_cluster_id``, ``shape_config``, ``metadata``) and terminated on
  suspend; it is found again by display name and, when given, its tags (so another cluster's
  instance of the same name in the compartment is never taken for it). The address is
  ``private_ip`` when given, else read from its VNIC. An instance of the node still
  terminating holds that address and host name: a launch waits for it to be gone (up to
  ``terminate_wait``, 900 s), or OCI refuses the launch.

Auth: instance principals (the controller's dynamic group) unless ``auth: config_file`` with
``config_file`` / ``profile``. ``region``; ``service_endpoint`` overrides the Compute endpoint
(and ``network_endpoint`` the Networking one).
"""

from __future__ import annotations

import time
from typing import Any

from .base import OFF, ON, UNKNOWN, NodeResult, PerNodeDriver

_ON_STATES = {"RUNNING", "STARTING", "PROVISIONING", "MOVING"}
_OFF_STATES = {"STOPPED", "STOPPING", "TERMINATED", "TERMINATING"}
_GONE = {"TERMINATED", "TERMINATING"}


class OciDriver(PerNodeDriver):
    name = "oci"

    def __init__(self, params: dict[str, dict[str, Any]],
                 credentials: dict[str, dict[str, str]] | None = None) -> None:
        super().__init__(params, credentials)
        self._clients: dict[tuple[str, ...], Any] = {}

    def _client(self, node: str, kind: str = "compute") -> Any:
        import oci  # PyPI only (not packaged by Debian)

        p = self.params[node]
        endpoint = p.get("service_endpoint" if kind == "compute" else "network_endpoint")
        key = (kind, str(p.get("auth")), str(p.get("config_file")), str(p.get("profile")),
               str(p.get("region")), str(endpoint))
        if key not in self._clients:
            kwargs: dict[str, Any] = {}
            if p.get("auth", "instance_principal") == "config_file":
                config = oci.config.from_file(p.get("config_file", oci.config.DEFAULT_LOCATION),
                                              p.get("profile", "DEFAULT"))
            else:
                signer = oci.auth.signers.InstancePrincipalsSecurityTokenSigner()
                config = {"region": signer.region}
                kwargs["signer"] = signer
            if p.get("region"):
                config["region"] = p["region"]
            if endpoint:
                kwargs["service_endpoint"] = endpoint
            cls = oci.core.ComputeClient if kind == "compute" else oci.core.VirtualNetworkClient
            self._clients[key] = cls(config, **kwargs)
        return self._clients[key]

    def _mode(self, node: str) -> str:
        return str(self.params[node].get("mode", "start-stop"))

    @staticmethod
    def _power(lifecycle_state: str | None) -> str:
        if lifecycle_state in _ON_STATES:
            return ON
        if lifecycle_state in _OFF_STATES:
            return OFF
        return UNKNOWN

    def _instances(self, node: str) -> list[Any]:
        """launch-terminate: the node's instances, live or not (by display name and tags)."""
        p = self.params[node]
        found = self._client(node).list_instances(
            p["compartment_id"], display_name=p.get("display_name", node)).data
        tags = p.get("freeform_tags") or {}
        return [i for i in found
                if all((i.freeform_tags or {}).get(k) == v for k, v in tags.items())]

    def _find(self, node: str) -> Any | None:
        """launch-terminate: the node's live instance, or None."""
        live = [i for i in self._instances(node) if i.lifecycle_state not in _GONE]
        return live[0] if live else None

    def _wait_terminated(self, node: str) -> None:
        """Until no instance of the node is TERMINATING (it holds the node's address and host
        name until then), within ``terminate_wait``; past it the launch says why it fails."""
        p = self.params[node]
        deadline = time.monotonic() + float(p.get("terminate_wait", 900))
        while any(i.lifecycle_state == "TERMINATING" for i in self._instances(node)) \
                and time.monotonic() < deadline:
            time.sleep(float(p.get("poll_interval", 5)))

    def _address(self, node: str, instance: Any) -> str | None:
        p = self.params[node]
        if p.get("private_ip"):
            return str(p["private_ip"])
        deadline = time.monotonic() + float(p.get("address_timeout", 300))
        while True:
            attachments = self._client(node).list_vnic_attachments(
                p["compartment_id"], instance_id=instance.id).data
            for att in attachments:
                if att.lifecycle_state == "ATTACHED" and att.vnic_id:
                    vnic = self._client(node, "network").get_vnic(att.vnic_id).data
                    if vnic.private_ip:
                        return str(vnic.private_ip)
            if time.monotonic() >= deadline:
                return None
            time.sleep(float(p.get("poll_interval", 5)))

    def _launch(self, node: str) -> Any:
        import oci

        p = self.params[node]
        models = oci.core.models
        vnic = models.CreateVnicDetails(subnet_id=p["subnet_id"], assign_public_ip=False,
                                        hostname_label=p.get("hostname_label", node),
                                        private_ip=p.get("private_ip"))
        details = models.LaunchInstanceDetails(
            compartment_id=p["compartment_id"], availability_domain=p["availability_domain"],
            shape=p["shape"], display_name=p.get("display_name", node), create_vnic_details=vnic,
            source_details=models.InstanceSourceViaImageDetails(
                image_id=p["image_id"], boot_volume_size_in_gbs=p.get("boot_volume_gbs")),
            metadata=p.get("metadata"), freeform_tags=p.get("freeform_tags"),
            # The RDMA compute cluster the static nodes are in (the stack's, by the oci
            # provider): without it the node has no RDMA path to them.
            compute_cluster_id=p.get("compute_cluster_id"),
            shape_config=(models.LaunchInstanceShapeConfigDetails(**p["shape_config"])
                          if p.get("shape_config") else None),
        )
        return self._client(node).launch_instance(details).data

    def _on(self, node: str) -> NodeResult:
        p = self.params[node]
        if self._mode(node) == "start-stop":
            instance = self._client(node).get_instance(p["instance_id"]).data
            if self._power(instance.lifecycle_state) != ON:
                self._client(node).instance_action(p["instance_id"], "START")
            return NodeResult(node=node, ok=True, power=ON)
        instance = self._find(node)
        if instance is None:
            self._wait_terminated(node)
            instance = self._launch(node)
        address = self._address(node, instance)
        return NodeResult(node=node, ok=True, power=ON, address=address)

    def _off(self, node: str, force: bool) -> NodeResult:
        p = self.params[node]
        if self._mode(node) == "start-stop":
            instance = self._client(node).get_instance(p["instance_id"]).data
            if self._power(instance.lifecycle_state) != OFF:
                self._client(node).instance_action(p["instance_id"],
                                                   "STOP" if force else "SOFTSTOP")
            return NodeResult(node=node, ok=True, power=OFF)
        found = self._find(node)
        if found is not None:
            self._client(node).terminate_instance(found.id, preserve_boot_volume=False)
        return NodeResult(node=node, ok=True, power=OFF)

    def _status(self, node: str) -> NodeResult:
        p = self.params[node]
        if self._mode(node) == "start-stop":
            instance = self._client(node).get_instance(p["instance_id"]).data
            return NodeResult(node=node, ok=True, power=self._power(instance.lifecycle_state))
        found = self._find(node)
        return NodeResult(node=node, ok=True,
                          power=OFF if found is None else self._power(found.lifecycle_state))
