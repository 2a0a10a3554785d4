"""``%trainjob_status``'s GPU part (magics/views/gpus.py): a line per GPU, the pods a command
kept from being sampled, and the HTML table escaping what the pod said."""

from __future__ import annotations

from trainjob_magics.engine.result import GpuInfo, PodGpus
from trainjob_magics.magics.views.gpus import gpu_html, gpu_text, worth_showing

OK = PodGpus("p-node-0", "ok", (GpuInfo(0, "T4", 35.0, 1234.0, 15360.0),), 1.0).as_dict()
MIG = PodGpus("p-node-1", "ok", (GpuInfo(1, "A100", None, 13.0, None),), 1.0).as_dict()
BUSY = PodGpus("p-node-2", "busy", message="a command runs").as_dict()
ODD = PodGpus("p-node-3", "error", message="<script>x</script>").as_dict()
ABSENT = PodGpus("p-node-4", "absent", message="no nvidia-smi in the pod").as_dict()


def test_text() -> None:
    assert gpu_text([OK, MIG, BUSY]).splitlines()[1:] == [
        "  p-node-0  GPU 0 T4: 35 % · 1234/15360 MiB",
        "  p-node-1  GPU 1 A100: n/a · 13/n/a MiB",
        "  p-node-2  not sampled: a command runs in the job",
    ]


def test_shown_only_with_readings_or_a_busy_pod() -> None:
    assert not worth_showing([ABSENT]) and not worth_showing([])
    assert worth_showing([ABSENT, BUSY]) and worth_showing([OK])


def test_html_escapes_what_the_pod_said() -> None:
    page = gpu_html([OK, ODD])
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "<td" in page and "35 %" in page and "1234/15360 MiB" in page
