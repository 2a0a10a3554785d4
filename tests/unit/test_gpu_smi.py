"""The ``nvidia-smi --query-gpu`` reader (engine/inventory/gpu_smi.py) and the GPU probe's
answers (gpu_probe.py), against the forms NVIDIA documents for ``--format=csv``: with and
without the header line (``noheader``), with and without units (``nounits``), and the bracketed
words a GPU gives instead of a number (``[N/A]``, ``[Not Supported]``, ...; MIG's
utilization). No GPU was at hand: these are the documented forms, not captured output."""

from __future__ import annotations

import pytest

from trainjob_magics.engine.inventory.gpu_probe import probe_argv, read_probe
from trainjob_magics.engine.inventory.gpu_smi import QUERY_ARGS, parse_query_gpu
from trainjob_magics.engine.result import ExecResult, GpuInfo

A100 = "NVIDIA A100-SXM4-80GB"
TWO = [
    GpuInfo(0, A100, 35.0, 1234.0, 81920.0),
    GpuInfo(1, A100, 0.0, 0.0, 81920.0),
]

FORMS = {
    # --format=csv: the header, then values with units
    "csv": (
        "index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
        f"0, {A100}, 35 %, 1234 MiB, 81920 MiB\n"
        f"1, {A100}, 0 %, 0 MiB, 81920 MiB\n"
    ),
    # --format=csv,noheader
    "csv,noheader": (f"0, {A100}, 35 %, 1234 MiB, 81920 MiB\n1, {A100}, 0 %, 0 MiB, 81920 MiB\n"),
    # --format=csv,nounits: the header keeps its units, the values have none
    "csv,nounits": (
        "index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
        f"0, {A100}, 35, 1234, 81920\n1, {A100}, 0, 0, 81920\n"
    ),
    # --format=csv,noheader,nounits: what the probe asks for
    "csv,noheader,nounits": f"0, {A100}, 35, 1234, 81920\n1, {A100}, 0, 0, 81920\n",
}


def test_the_probe_asks_for_the_form_read_here() -> None:
    assert QUERY_ARGS == (
        "--query-gpu=index,name,utilization.gpu,memory.used,memory.total",
        "--format=csv,noheader,nounits",
    )
    argv = probe_argv(True)
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["trainjob-magics", "sample", *QUERY_ARGS]
    assert probe_argv(False)[4] == "check"


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_documented_csv_form_reads_the_same(form: str) -> None:
    gpus, other = parse_query_gpu(FORMS[form])
    assert gpus == TWO and other == []


def test_values_that_are_not_numbers_are_none() -> None:
    text = (
        "0, NVIDIA A100-SXM4-40GB, [N/A], 13 MiB, 40960 MiB\n"  # MIG: utilization [N/A]
        "1, Quadro K600, [Not Supported], [Not Supported], 977 MiB\n"
        "2, Tesla T4, [Insufficient Permissions], [Unknown Error], [GPU requires reset]\n"
        "3, [N/A], N/A, 5, 15360\n"
    )
    gpus, other = parse_query_gpu(text)
    assert other == []
    assert gpus[0] == GpuInfo(0, "NVIDIA A100-SXM4-40GB", None, 13.0, 40960.0)
    assert gpus[1] == GpuInfo(1, "Quadro K600", None, None, 977.0)
    assert gpus[2] == GpuInfo(2, "Tesla T4", None, None, None)
    assert gpus[3] == GpuInfo(3, "", None, 5.0, 15360.0)
    assert gpus[0].text() == "GPU 0: n/a · 13/40960 MiB"


def test_odd_lines_are_kept_aside_not_errors() -> None:
    text = (
        "WARNING: infoROM is corrupted at gpu 0000:00:04.0\n"
        "\n"
        f"0, {A100}, 35, 1234, 81920\n"
        "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error\n"
        "x, y, z, w, v\n"
        "0, too, few\n"
    )
    gpus, other = parse_query_gpu(text)
    assert gpus == [TWO[0]]
    assert other == [
        "WARNING: infoROM is corrupted at gpu 0000:00:04.0",
        "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
        "x, y, z, w, v",
        "0, too, few",
    ]


def test_a_name_with_a_comma_and_a_reordered_header() -> None:
    gpus, _ = parse_query_gpu("0, Odd, Name, 7, 1, 2\n")
    assert gpus == [GpuInfo(0, "Odd, Name", 7.0, 1.0, 2.0)]
    text = (
        "name, index, memory.total [MiB], memory.used [MiB], utilization.gpu [%]\n"
        "T4, 3, 15360 MiB, 10 MiB, 2 %\n"
    )
    assert parse_query_gpu(text)[0] == [GpuInfo(3, "T4", 2.0, 10.0, 15360.0)]


def test_nothing_to_read() -> None:
    assert parse_query_gpu("") == ([], [])
    assert parse_query_gpu("No devices were found\n") == ([], ["No devices were found"])


def _answer(stdout: str, code: int | None = 0, stderr: str = "") -> ExecResult:
    return ExecResult(stdout, stderr, code, 0.1, pod="p")


def test_probe_answers() -> None:
    ok = read_probe("p", _answer("nvidia-smi\n" + FORMS["csv,noheader,nounits"] + "exit 0\n"))
    assert ok.state == "ok" and list(ok.gpus) == TWO and ok.message == ""
    assert ok.as_dict()["gpus"][0] == {
        "index": 0,
        "name": A100,
        "utilization": 35.0,
        "memoryUsedMiB": 1234.0,
        "memoryTotalMiB": 81920.0,
    }
    assert read_probe("p", _answer("busy\n")).state == "busy"
    absent = read_probe("p", _answer("absent\n"))
    assert absent.state == "absent" and absent.message == "no nvidia-smi in the pod"
    assert read_probe("p", _answer("idle\n")).state == "idle"
    none = read_probe("p", _answer("nvidia-smi\nNo devices were found\nexit 6\n"))
    assert none.state == "no-gpu" and none.message == "No devices were found"
    driver = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    failed = read_probe("p", _answer(f"nvidia-smi\n{driver}\nexit 9\n"))
    assert failed.state == "error" and failed.message == driver
    hung = read_probe("p", _answer("nvidia-smi\nexit 124\n"))
    assert hung.state == "error" and "did not answer within 8 s" in hung.message
    noted = read_probe("p", _answer("nvidia-smi\nWARNING: x\n0, T4, 1, 2, 3\nexit 0\n"))
    assert noted.state == "ok" and noted.message == "1 line(s) not understood: WARNING: x"
    no_sh = read_probe("p", _answer("", 126, 'exec: "sh": executable file not found in $PATH'))
    assert no_sh.state == "error" and "executable file not found" in no_sh.message
