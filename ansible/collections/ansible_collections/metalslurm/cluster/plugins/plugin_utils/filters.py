"""What the collection's filter plugins share: reading hostvars, and turning the module_utils'
errors (each a sentence a user can act on) into Ansible's filter error."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from ansible.errors import AnsibleFilterError


def host_view(hostvars: Any, host: str) -> Any:
    """``hostvars[host]``, to read several variables of one host: each ``hostvars[host]``
    makes Ansible merge every variable of the host again (VariableManager.get_vars), which a
    filter looping over a thousand hosts must do once per host, not once per variable."""
    try:
        return hostvars[host]
    except (KeyError, TypeError):
        return {}


def var_of(view: Any, key: str, default: Any = None) -> Any:
    """``view[key]`` of a :func:`host_view`, or ``default`` when the variable is not there
    (or is undefined in Ansible's lazy hostvars)."""
    try:
        value = view[key]
    except (KeyError, TypeError):
        return default
    if type(value).__name__ in ("AnsibleUndefined", "Marker"):
        return default
    return value


def hostvar(hostvars: Any, host: str, key: str, default: Any = None) -> Any:
    """``hostvars[host][key]``, or ``default`` when the host or the variable is not there
    (or is undefined in Ansible's lazy hostvars)."""
    return var_of(host_view(hostvars, host), key, default)


def filter_errors(*errors: type[Exception]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A filter whose ``errors`` reach the play as AnsibleFilterError with their sentence."""
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except errors as exc:
                raise AnsibleFilterError(str(exc)) from exc
        return wrapper
    return decorate
