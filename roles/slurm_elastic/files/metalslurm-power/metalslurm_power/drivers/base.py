"""The driver interface: power_on / power_off / status for a batch of nodes."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

ON = "on"
OFF = "off"
UNKNOWN = "unknown"


@dataclass
class NodeResult:
    """What a driver reports for one node: ``ok`` or ``error``; ``power`` on/off/unknown when
    known; ``address`` when the machine's private address is known (dynamic addresses)."""

    node: str
    ok: bool
    power: str = UNKNOWN
    address: str | None = None
    error: str | None = None

    @classmethod
    def failed(cls, node: str, error: str | BaseException) -> NodeResult:
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return cls(node=node, ok=False, error=text or type(error).__name__)


class PowerDriver(abc.ABC):
    """One driver instance serves the nodes in ``params``. Methods never raise for a node's
    failure: they return a NodeResult with ``ok=False`` and the error text."""

    name = "base"
    max_workers = 16

    def __init__(self, params: dict[str, dict[str, Any]],
                 credentials: dict[str, dict[str, str]] | None = None) -> None:
        self.params = params
        self._credentials = credentials or {}

    def credentials(self, node: str) -> tuple[str | None, str | None]:
        creds = self._credentials.get(node) or self._credentials.get("default") or {}
        return creds.get("username"), creds.get("password")

    @abc.abstractmethod
    def power_on(self, nodes: Sequence[str]) -> dict[str, NodeResult]: ...

    @abc.abstractmethod
    def power_off(self, nodes: Sequence[str], force: bool = False) -> dict[str, NodeResult]: ...

    @abc.abstractmethod
    def status(self, nodes: Sequence[str]) -> dict[str, NodeResult]: ...

    def _each(self, nodes: Sequence[str],
              action: Callable[[str], NodeResult]) -> dict[str, NodeResult]:
        """Run ``action`` for every node, concurrently (one BMC or API call each)."""

        def guarded(node: str) -> NodeResult:
            try:
                return action(node)
            except Exception as exc:  # a node's failure is a result, not a crash
                return NodeResult.failed(node, exc)

        if len(nodes) <= 1:
            return {node: guarded(node) for node in nodes}
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(nodes))) as pool:
            return dict(zip(nodes, pool.map(guarded, nodes)))


class PerNodeDriver(PowerDriver):
    """A driver that makes one call per node (a BMC, an API object): subclasses implement
    ``_on``, ``_off`` and ``_status`` for one node; batches run them concurrently."""

    @abc.abstractmethod
    def _on(self, node: str) -> NodeResult: ...

    @abc.abstractmethod
    def _off(self, node: str, force: bool) -> NodeResult: ...

    @abc.abstractmethod
    def _status(self, node: str) -> NodeResult: ...

    def power_on(self, nodes: Sequence[str]) -> dict[str, NodeResult]:
        return self._each(nodes, self._on)

    def power_off(self, nodes: Sequence[str], force: bool = False) -> dict[str, NodeResult]:
        return self._each(nodes, lambda node: self._off(node, force))

    def status(self, nodes: Sequence[str]) -> dict[str, NodeResult]:
        return self._each(nodes, self._status)
