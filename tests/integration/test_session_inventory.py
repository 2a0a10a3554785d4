"""``SessionInventory`` on its own, against the local cluster: it lists this user's TrainJobs
and no one else's (the created-by note), every user's with ``all_users``, and warns of an idle
stop from 300 s before it, not a tenth of a second earlier (read at a time the test sets)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.helpers.polling import wait_until
from trainjob_magics.engine.inventory.records import IDLE_WARNING_SECONDS
from trainjob_magics.engine.inventory.service import SessionInventory, current_user
from trainjob_magics.engine.kube.names import (
    CREATED_BY_ANNOTATION,
    IDLE_STOP_ANNOTATION,
    LAST_COMMAND_ANNOTATION,
)
from trainjob_magics.engine.trainjob.body import build_trainjob
from trainjob_magics.localcluster import LocalCluster

NS = "default"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("inventory-cluster")
    with LocalCluster(root_dir=root) as cluster:
        yield cluster.write_kubeconfig(root / "kubeconfig")


@pytest.fixture
def create_job(kubeconfig: Path) -> Iterator[Callable[[dict[str, str | None]], str]]:
    """Create a TrainJob of this project with these notes (None removes one); its name."""
    custom = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
    made: list[str] = []

    def create(notes: dict[str, str | None]) -> str:
        name = "i" + secrets.token_hex(5)
        body = build_trainjob(name, NS, "torch-distributed", idle_timeout=None)
        annotations = body["metadata"]["annotations"]
        for key, value in notes.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        custom.create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", NS, "trainjobs", body
        )
        made.append(name)
        return name

    yield create
    for name in made:
        custom.delete_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", NS, "trainjobs", name
        )


@pytest.fixture
def inventories() -> Iterator[list[SessionInventory]]:
    made: list[SessionInventory] = []
    yield made
    for inventory in made:
        inventory.stop()


def _seen(inventory: SessionInventory, *names: str) -> bool:
    """Every job is in the inventory's watch (``job`` reads any user's, by name)."""
    return all(inventory.job(NS, n)["state"] not in ("Unknown", "Gone") for n in names)


def _listed(inventory: SessionInventory) -> set[str]:
    return {s["name"] for s in inventory.snapshot()["sessions"]}


def test_lists_this_users_trainjobs_and_no_one_elses(
    kubeconfig: Path, create_job: Any, inventories: list[SessionInventory]
) -> None:
    me = current_user()
    mine = create_job({CREATED_BY_ANNOTATION: me})
    theirs = create_job({CREATED_BY_ANNOTATION: f"not-{me}"})
    nobodys = create_job({CREATED_BY_ANNOTATION: None})
    inventory = SessionInventory(config_file=str(kubeconfig))
    inventories.append(inventory)
    wait_until(lambda: _seen(inventory, mine, theirs, nobodys), timeout=30)

    snapshot = inventory.snapshot()
    assert snapshot["user"] == me
    listed = {s["name"] for s in snapshot["sessions"]}
    assert mine in listed
    assert theirs not in listed and nobodys not in listed
    assert next(s for s in snapshot["sessions"] if s["name"] == mine)["user"] == me

    everyone = SessionInventory(config_file=str(kubeconfig), all_users=True)
    inventories.append(everyone)
    wait_until(lambda: {mine, theirs, nobodys} <= _listed(everyone), timeout=30)
    assert everyone.snapshot()["user"] is None


def test_the_idle_warning_starts_exactly_300_s_before_the_idle_stop(
    kubeconfig: Path, create_job: Any, inventories: list[SessionInventory]
) -> None:
    assert IDLE_WARNING_SECONDS == 300.0
    last = datetime.now(timezone.utc).replace(microsecond=0)
    name = create_job(
        {
            CREATED_BY_ANNOTATION: current_user(),
            LAST_COMMAND_ANNOTATION: last.isoformat().replace("+00:00", "Z"),
            IDLE_STOP_ANNOTATION: "600",
        }
    )
    now = [last]
    inventory = SessionInventory(config_file=str(kubeconfig), clock=lambda: now[0])
    inventories.append(inventory)
    wait_until(lambda: _seen(inventory, name), timeout=30)

    def read_at(seconds_after_last: float) -> list[dict[str, Any]]:
        """The record in the sidebar's list and a panel's, read that long after the command."""
        now[0] = last + timedelta(seconds=seconds_after_last)
        listed = next(s for s in inventory.snapshot()["sessions"] if s["name"] == name)
        return [listed, inventory.job(NS, name)]

    for record in read_at(300.0):  # 300 s left: just inside
        assert (record["idleStopIn"], record["idleWarning"]) == (300.0, True)
    for record in read_at(299.9):  # 300.1 s left: just outside
        assert (record["idleStopIn"], record["idleWarning"]) == (300.1, False)
    for record in read_at(0.0):
        assert (record["idleStopIn"], record["idleWarning"]) == (600.0, False)
    for record in read_at(700.0):  # overdue: still warned, at 0
        assert (record["idleStopIn"], record["idleWarning"]) == (0.0, True)
