"""Input checks that run before anything is sent to the cluster.

Every failure raises :class:`InvalidInputError` with one line saying what to fix.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping, Sequence

from .errors import InvalidInputError

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"^{DNS1123_LABEL}(\.{DNS1123_LABEL})*$")
# Kubernetes resource.Quantity: <signedNumber><suffix>; negative amounts are not resources.
QUANTITY = re.compile(
    r"^\+?(?P<num>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))?$"
)
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?)$")


def validate_name(name: object, what: str = "TrainJob name") -> str:
    """Check a DNS-1035 label (``^[a-z]([-a-z0-9]*[a-z0-9])?$``, at most 63 characters)."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{what} must be a non-empty string, got {name!r}")
    if len(name) > 63:
        raise InvalidInputError(f"{what} {name!r} is {len(name)} characters long; use at most 63")
    if not DNS1035.match(name):
        raise InvalidInputError(
            f"{what} {name!r} is not a DNS-1035 label: use lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return name


def validate_object_name(name: object, what: str) -> str:
    """Check a DNS-1123 subdomain (runtime and namespace names)."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{what} must be a non-empty string, got {name!r}")
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        raise InvalidInputError(
            f"{what} {name!r} is not a valid Kubernetes name: use lowercase letters, digits, "
            "'-' and '.', starting and ending with a letter or digit"
        )
    return name


def validate_namespace(namespace: object) -> str:
    """Check a namespace name (DNS-1123 label, at most 63 characters)."""
    if not isinstance(namespace, str) or not re.match(rf"^{DNS1123_LABEL}$", namespace or ""):
        raise InvalidInputError(
            f"namespace {namespace!r} is not a valid namespace name: use lowercase letters, "
            "digits and '-'"
        )
    if len(namespace) > 63:
        raise InvalidInputError(f"namespace {namespace!r} is longer than 63 characters")
    return namespace


def validate_num_nodes(num_nodes: object) -> int | None:
    """Check ``num_nodes`` is ``None`` or an integer >= 1."""
    if num_nodes is None:
        return None
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int):
        raise InvalidInputError(f"num_nodes must be an integer >= 1, got {num_nodes!r}")
    if num_nodes < 1:
        raise InvalidInputError(f"num_nodes must be at least 1, got {num_nodes}")
    return num_nodes


def validate_quantity(value: object, what: str) -> str | None:
    """Check a Kubernetes resource quantity such as ``4``, ``500m``, ``16Gi``; return it as str."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidInputError(f"{what} must be a quantity such as 2, 500m or 16Gi, got {value!r}")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{what} must be a finite quantity, got {value!r}")
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise InvalidInputError(f"{what} must be a quantity such as 2, 500m or 16Gi, got {value!r}")
    if not QUANTITY.match(text):
        raise InvalidInputError(
            f"{what} {value!r} is not a Kubernetes quantity: use a non-negative number with an "
            "optional suffix, e.g. 2, 500m, 16Gi, 1.5G"
        )
    return text


def validate_gpu(value: object) -> str | None:
    """Check a GPU count: a whole number >= 0 (GPUs cannot be shared by quantity)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidInputError(f"gpu must be a whole number such as 1 or 8, got {value!r}")
    text = str(value).strip()
    if not text.isdigit():
        raise InvalidInputError(f"gpu must be a whole number such as 1 or 8, got {value!r}")
    return str(int(text))


def validate_env(env: object) -> dict[str, str]:
    """Check environment variables: names like C identifiers (plus '-' and '.'), str values."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise InvalidInputError(f"env must be a dict of str to str, got {type(env).__name__}")
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise InvalidInputError(
                f"env name {key!r} is invalid: use letters, digits, '_', '-' and '.', "
                "not starting with a digit"
            )
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise InvalidInputError(f"env value of {key} must be a string, got {value!r}")
        out[key] = str(value)
    return out


def validate_labels(labels: object) -> dict[str, str]:
    """Check Kubernetes label keys (``[prefix/]name``) and values."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InvalidInputError(f"labels must be a dict of str to str, got {type(labels).__name__}")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not _label_key_ok(key):
            raise InvalidInputError(
                f"label key {key!r} is invalid: use [prefix/]name with a DNS prefix and a name "
                "of at most 63 letters, digits, '-', '_' or '.'"
            )
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            raise InvalidInputError(
                f"label value {value!r} of {key} is invalid: use at most 63 letters, digits, "
                "'-', '_' or '.', starting and ending with a letter or digit"
            )
        out[key] = value
    return out


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_NAME.match(name))


def validate_command(command: object, what: str = "command") -> list[str] | None:
    """Check a container command: ``None``, a non-empty string or a non-empty list of str."""
    if command is None:
        return None
    if isinstance(command, str):
        if not command.strip():
            raise InvalidInputError(f"{what} is empty: give a command to run")
        if "\x00" in command:
            raise InvalidInputError(f"{what} contains a NUL character, which cannot be passed")
        return ["sh", "-c", command]
    if isinstance(command, Sequence) and not isinstance(command, (bytes, bytearray)):
        argv = list(command)
        if not argv:
            raise InvalidInputError(f"{what} is empty: give a command to run")
        for arg in argv:
            if not isinstance(arg, str):
                raise InvalidInputError(
                    f"every {what} argument must be a str, got {type(arg).__name__}: {arg!r}"
                )
        if any("\x00" in arg for arg in argv):
            raise InvalidInputError(f"{what} contains a NUL character, which cannot be passed")
        if not argv[0].strip():
            raise InvalidInputError(f"{what} starts with an empty program name")
        return argv
    raise InvalidInputError(
        f"{what} must be a string (run with sh -c) or a list of arguments, "
        f"got {type(command).__name__}"
    )


def validate_timeout(timeout: object, what: str = "timeout") -> float | None:
    """Check a timeout in seconds: ``None`` or a positive number."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidInputError(f"{what} must be a number of seconds, got {timeout!r}")
    if not timeout > 0 or not math.isfinite(timeout):
        raise InvalidInputError(f"{what} must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def validate_exec(
    command: object, timeout: object, stdin: object
) -> tuple[list[str], float | None, bytes | None]:
    """``(argv, timeout, stdin bytes)`` of an ``execute()`` call; stdin is bytes or str (UTF-8)."""
    if command is None:
        raise InvalidInputError("command is empty: give a command to run")
    argv = validate_command(command)
    assert argv is not None
    if isinstance(stdin, str):
        data: bytes | None = stdin.encode("utf-8")
    elif stdin is None or isinstance(stdin, bytes):
        data = stdin
    elif isinstance(stdin, (bytearray, memoryview)):
        data = bytes(stdin)
    else:
        raise InvalidInputError(f"stdin must be bytes or str, got {type(stdin).__name__}")
    return argv, validate_timeout(timeout), data


def validate_port(value: object, what: str = "port", *, zero: bool = False) -> int:
    """A TCP port number: 1-65535 (0 too with ``zero``: any free port)."""
    low = 0 if zero else 1
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
        raise InvalidInputError(f"{what} must be a port number from {low} to 65535, got {value!r}")
    return value


def validate_address(value: object) -> str:
    """An IP address of this host to listen on (``127.0.0.1``, ``0.0.0.0``, ``::1``)."""
    text = str(value or "").strip()
    if text == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise InvalidInputError(
            f"address must be an IP address of this host (such as 127.0.0.1 or 0.0.0.0), "
            f"got {value!r}"
        ) from None


def validate_max_memory_output(value: object) -> int | None:
    """``None`` (the default) or a number of bytes >= 0 kept in memory per output stream."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(
            f"max_memory_output must be a number of bytes >= 0 (or None), got {value!r}"
        )
    return value
