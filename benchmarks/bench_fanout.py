"""Row 6: fan-out of one command to 8/32/64 pods vs the same commands one after another."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from benchmarks import baselines, fixtures, k8s
from benchmarks.common import NOT_AVAILABLE, Context, Row, Stats, secs, yes_no

NAME = "fanout"
CMD = ["sh", "-c", "sleep 0.1; hostname"]


@dataclass
class Fanout:
    """Per pod count: one after another (stock client), the floor (a raw reader per pod, one
    thread each) and ours (``execute(..., pods="all")``), plus why ours is missing, if it is."""

    sizes: list[int]
    reps: int
    seq: dict[int, Stats] = field(default_factory=dict)
    floor: dict[int, Stats] = field(default_factory=dict)
    ours: dict[int, Stats] = field(default_factory=dict)
    why: str = ""
    startup: dict[int, float] = field(default_factory=dict)  # TrainJob created -> all Running


def _rounds(
    clients: dict[str, Callable[[], None]], reps: int, samples: dict[str, list[float]]
) -> None:
    """``reps`` interleaved rounds; the floor and ours swap places every round."""
    for i in range(reps):
        order = ["seq", "floor", "ours"] if i % 2 else ["seq", "ours", "floor"]
        for k in (k for k in order if k in clients):
            t0 = time.perf_counter()
            clients[k]()
            samples[k].append(time.perf_counter() - t0)


def _size(
    kubeconfig: str, namespace: str, name: str, pods: list[str], reps: int, tm: Any
) -> dict[str, list[float]]:
    """Samples of the three clients on the pods of one TrainJob."""
    core = k8s.core_api(kubeconfig)
    target = k8s.read_kubeconfig(kubeconfig)
    sess = None
    if tm is not None:
        sess = tm.attach(name, namespace=namespace, config_file=kubeconfig)
        sess.execute(CMD, pods="all")  # warm-up

    def seq() -> None:
        for pod in pods:
            r = baselines.stock_exec(core, pod, namespace, CMD)
            assert r.status and r.status["returncode"] == 0

    def ours() -> None:
        got = sess.execute(CMD, pods="all")
        assert len(got) == len(pods) and not getattr(got, "errors", None), got

    samples: dict[str, list[float]] = {"seq": [], "floor": [], "ours": []}
    with ThreadPoolExecutor(len(pods)) as pool:

        def floor() -> None:
            out = list(pool.map(lambda p: baselines.raw_exec(target, namespace, p, CMD), pods))
            assert all(r.status and r.status.get("status") == "Success" for r in out)

        clients: dict[str, Callable[[], None]] = {"seq": seq, "floor": floor}
        if sess is not None:
            clients["ours"] = ours
        _rounds(clients, reps, samples)
    return samples


def measure(
    kubeconfig: str,
    namespace: str,
    sizes: list[int],
    reps: int,
    jobs: list[str],
    *,
    cpu: str | None = None,
    timeout: float = 120,
) -> Fanout:
    """One TrainJob per size (its name appended to ``jobs`` for the cleanup; deleted after its
    size), then, on the same pods, interleaved: one after another, the floor, ours."""
    res = Fanout(sizes, reps)
    tm = None
    try:
        tm = fixtures.engine_api()
        if not fixtures.supports_kwarg(tm.TrainJobSession.execute, "pods"):
            res.why = "`session.execute(..., pods=)` not built yet (issue 6)"
    except fixtures.Unavailable as e:
        res.why = str(e)
    for n in sizes:
        name = k8s.new_name(f"fan{n}")
        t0 = time.perf_counter()
        k8s.create_trainjob(kubeconfig, namespace, name, num_nodes=n, cpu=cpu)
        jobs.append(name)
        pods = k8s.wait_pods_running(kubeconfig, namespace, name, count=n, timeout=timeout)
        res.startup[n] = time.perf_counter() - t0
        got = _size(kubeconfig, namespace, name, pods, reps, None if res.why else tm)
        res.seq[n], res.floor[n] = Stats(got["seq"]), Stats(got["floor"])
        if got["ours"]:
            res.ours[n] = Stats(got["ours"])
        k8s.delete_trainjob(kubeconfig, namespace, name)
    return res


def rows(
    res: Fanout,
    bench: str = NAME,
    where: str = "",
    floor_limit: float = 1.25,
    floor_goal: str = "",
    seq_need: float = 5.0,
) -> list[Row]:
    """Ours vs one after another, and vs the floor."""
    sizes, seq, floor, ours = res.sizes, res.seq, res.floor, res.ours
    base_txt = ", ".join(f"{n}: {secs(seq[n].median)}" for n in sizes)
    floor_txt = ", ".join(f"{n}: {secs(floor[n].median)}" for n in sizes)
    floor_growth = floor[sizes[-1]].median / floor[sizes[0]].median
    counts = "/".join(map(str, sizes))
    what = f"Fan-out `{' '.join(CMD[2:])}` to {counts} pods{where} (n={res.reps})"
    goal = f"near-constant: {sizes[-1]} pods <= 2x the time of {sizes[0]}"
    # This cluster spawns every exec's processes on the machine's own cores, so its floor grows
    # with the pod count too: the engine's near-constant goal is the stub row's
    # (bench_fanout_stub); here ours must stay near this machine's floor at every size.
    floor_goal = floor_goal or (
        f"<= {floor_limit}x the floor at every size (near-constant: the stub row)"
    )
    if not ours:
        return [
            Row(
                what,
                f"{NOT_AVAILABLE}: {res.why}",
                f"one after another: {base_txt}",
                "-",
                goal,
                "n/a",
                bench=bench,
            ),
            Row(
                f"{what}: floor",
                "-",
                f"raw reader, one thread per pod: {floor_txt}",
                "-",
                "reference",
                "n/a",
                bench=bench,
            ),
        ]
    our_txt = ", ".join(f"{n}: {secs(ours[n].median)}" for n in sizes)
    growth = ours[sizes[-1]].median / ours[sizes[0]].median
    speed = ", ".join(f"{seq[n].median / ours[n].median:.1f}x" for n in sizes)
    vs_floor = ", ".join(f"{ours[n].median / floor[n].median:.2f}x" for n in sizes)
    near_floor = all(ours[n].median <= floor_limit * floor[n].median for n in sizes)
    return [
        Row(
            f"{what} vs one after another",
            our_txt,
            f"stock client, one pod after another: {base_txt}",
            f"{speed} faster; ours {sizes[-1]}/{sizes[0]} pods: {growth:.2f}x, the floor's "
            f"{floor_growth:.2f}x",
            f">= {seq_need:g}x faster than one after another at every size",
            yes_no(all(seq[n].median >= seq_need * ours[n].median for n in sizes)),
            bench=bench,
        ),
        Row(
            f"{what} vs this machine's floor",
            our_txt,
            f"raw reader, one thread per pod: {floor_txt} ({sizes[-1]}/{sizes[0]}: "
            f"{floor_growth:.2f}x)",
            f"ours / floor: {vs_floor}",
            floor_goal,
            yes_no(near_floor),
            bench=bench,
        ),
    ]


def run(ctx: Context) -> list[Row]:
    """Sequential stock-client baseline always; ours only once execute(..., pods=) exists."""
    res = measure(
        ctx.kubeconfig,
        ctx.namespace,
        [2, 4] if ctx.smoke else [8, 32, 64],
        1 if ctx.smoke else 3,
        ctx.shared.setdefault("jobs", []),
    )
    return rows(res)
