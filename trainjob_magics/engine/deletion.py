"""Delete a TrainJob with a foreground cascade."""

from __future__ import annotations

from kubernetes.client import ApiClient

from .apierrors import request
from .errors import NotFoundError
from .trainjob_body import GROUP, trainjob_path

TRAINJOB_RESOURCE = f"trainjobs.{GROUP}"
# Foreground deletion keeps the TrainJob object (and so its name) until the JobSet, Jobs, pods and
# the MPI SSH secret are gone: once close() sees it disappear, reconnecting under the same name
# cannot collide with leftovers of the old job.
DELETE_BODY = {"propagationPolicy": "Foreground"}


def delete_trainjob(api: ApiClient, namespace: str, name: str) -> bool:
    """Delete a TrainJob (foreground cascade); False when it was already gone."""
    try:
        request(
            api,
            "DELETE",
            trainjob_path(namespace, name),
            verb="delete",
            resource=TRAINJOB_RESOURCE,
            namespace=namespace,
            name=name,
            body=DELETE_BODY,
        )
    except NotFoundError:
        return False
    return True
