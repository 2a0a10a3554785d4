"""What only kubectl and the official client need: legacy discovery documents, OpenAPI v3
(``/openapi/v3``) and meta.k8s.io Table answers.

Imports ``core/`` and the TrainJob schema (``apiserver/trainjob_schema.py``) only.
"""

from . import discovery, openapi, tables

__all__ = ["discovery", "openapi", "tables"]
