"""The Open MPI 5 image's recipe and runtime (devtools/realstack/images.py ``mpi5``,
devtools/realstack/openmpi5.py), without a stack: the trixie sources from this machine's bookworm
ones, a base key of its own that leaves bookworm's as it was, the ``mpi`` layer on the trixie
base, and Trainer's ``deepspeed-distributed`` turned into ``deepspeed-openmpi5``. The real image
and the real runtime run in test_openmpi5.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from devtools.realstack import images, openmpi5
from devtools.realstack.context import StackContext
from devtools.realstack.versions import DEFAULT
from tests.realstack.test_images import fake_base, unpack

BOOKWORM = [
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian"
    " bookworm main",
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian"
    " bookworm-updates main",
    "deb [signed-by=/k.gpg] http://deb.debian.org/debian-security bookworm-security main",
    "deb http://mirror.example/debian bookworm main contrib",
]


def test_trixie_sources_are_the_machines_bookworm_ones_renamed(monkeypatch):
    def machine(suite: str) -> list[str]:
        if suite != "bookworm":
            raise images.StackError(f"no apt source for Debian {suite}")
        return list(BOOKWORM)

    monkeypatch.setattr(images, "apt_sources_of_machine", machine)
    assert images.apt_sources() == BOOKWORM
    assert images.apt_sources("trixie") == [line.replace("bookworm", "trixie") for line in BOOKWORM]
    # a machine that names trixie itself keeps its own entries
    monkeypatch.setattr(
        images, "apt_sources_of_machine", lambda suite: [f"deb http://m {suite} main"]
    )
    assert images.apt_sources("trixie") == ["deb http://m trixie main"]


def test_the_trixie_base_has_a_key_of_its_own():
    key = images.base_key(BOOKWORM)
    assert key == images.base_key(BOOKWORM, "bookworm")  # bookworm's cache stays valid
    assert images.base_key(BOOKWORM, "trixie") != key
    argv = images.mmdebstrap_argv(Path("/o.tar"), BOOKWORM, "trixie")
    assert argv[argv.index("/o.tar") - 1] == "trixie"
    assert argv[2] == images.mmdebstrap_argv(Path("/o.tar"), BOOKWORM)[2]  # the same packages


def test_mpi5_is_the_mpi_layer_on_another_base(tmp_path):
    store = tmp_path / "store"
    base = fake_base(store)
    mpi = images.build_recipe(store, "mpi", base)
    mpi5 = images.build_recipe(store, "mpi5", base)
    assert mpi5.config["rootfs"] == mpi.config["rootfs"]  # the same layers on the same base
    assert mpi5.config["config"]["Labels"]["trainjob-magics.local/recipe"] == "mpi5"
    assert "Open MPI 5" in mpi5.config["config"]["Labels"]["trainjob-magics.local/stand-in-for"]
    for key in ("Env", "WorkingDir", "ExposedPorts", "Cmd"):
        assert mpi5.config["config"][key] == mpi.config["config"][key]
    out = images.write_oci_tar(store, mpi5, [images.OPENMPI5_IMAGE], tmp_path / "m5.tar")
    index = json.loads(unpack(out)["index.json"])
    assert [m["annotations"][images.NAME_ANNOTATION] for m in index["manifests"]] == [
        images.OPENMPI5_IMAGE
    ]


DEEPSPEED = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {
        "name": "deepspeed-distributed",
        "labels": {"trainer.kubeflow.org/framework": "deepspeed"},
        "x-previous-names": ["x"],
    },
    "spec": {
        "mlPolicy": {"numNodes": 1, "mpi": {"runLauncherAsNode": True}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": name,
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "node",
                                                "image": "ghcr.io/kubeflow/trainer/"
                                                "deepspeed-runtime:v2.2.1",
                                            }
                                        ]
                                    }
                                }
                            }
                        },
                    }
                    for name in ("launcher", "node")
                ]
            }
        },
    },
}


@pytest.fixture
def ctx(tmp_path, monkeypatch) -> StackContext:
    monkeypatch.setattr(openmpi5, "source_runtime", lambda c: copy.deepcopy(DEEPSPEED))
    return StackContext(run=tmp_path, versions=DEFAULT)


def test_the_runtime_is_deepspeed_on_the_open_mpi_5_image(ctx):
    rt = openmpi5.runtime_object(ctx)
    assert rt["kind"] == "ClusterTrainingRuntime"
    assert rt["metadata"] == {
        "name": openmpi5.RUNTIME,
        "labels": {"trainer.kubeflow.org/framework": "deepspeed", openmpi5.LABEL: "5"},
    }
    jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
    containers = [j["template"]["spec"]["template"]["spec"]["containers"][0] for j in jobs]
    assert [c["image"] for c in containers] == [images.OPENMPI5_IMAGE] * 2
    assert rt["spec"]["mlPolicy"] == DEEPSPEED["spec"]["mlPolicy"]
    namespaced = openmpi5.runtime_object(ctx, namespace="ns1", name="x")
    assert namespaced["kind"] == "TrainingRuntime"
    assert namespaced["metadata"]["namespace"] == "ns1" and namespaced["metadata"]["name"] == "x"


def test_the_preamble_sets_prrte_names_from_trainers_values():
    assert openmpi5.PREAMBLE == (
        'export PRTE_MCA_prte_default_hostfile="$OMPI_MCA_orte_default_hostfile"; '
        'export PRTE_MCA_plm_ssh_args="$OMPI_MCA_plm_rsh_args"'
    )
    assert "keep_fqdn" not in openmpi5.PREAMBLE
