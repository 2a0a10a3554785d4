"""Shared leaves of the local cluster: Status errors, the served kinds, the object store,
selectors, status conditions and fault injection.

Imports nothing from the rest of the local cluster.
"""

from .apierror import ApiError
from .faults import Faults
from .resources import Kind, Registry
from .store import Store

__all__ = ["ApiError", "Faults", "Kind", "Registry", "Store"]
