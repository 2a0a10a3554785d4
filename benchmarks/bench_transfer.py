"""File transfer: upload and download of a tree of small files plus one big file, and of one
large file, vs ``kubectl cp`` and vs the raw exec stream (the floor), in the same run."""

from __future__ import annotations

import io
import os
import random
import shutil
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import baselines, fixtures, k8s
from benchmarks.common import Context, Row, Stats, med_range, ratio, secs, yes_no

NAME = "transfer"
CONTAINER = "node"


def make_tree(root: Path, files: int, big: int) -> int:
    """``files`` small files (1-8 KiB, in 10 directories) plus one ``big``-byte file."""
    rng = random.Random(15)
    total = 0
    for i in range(files):
        sub = root / f"d{i % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(rng.randint(1024, 8192))
        (sub / f"f{i:04d}.bin").write_bytes(data)
        total += len(data)
    with open(root / "big.bin", "wb") as fh:
        fh.write(os.urandom(big))
    return total + big


def _mbps(nbytes: int, st: Stats) -> str:
    return f"{nbytes / st.median / 1e6:.0f} MB/s"


def run(ctx: Context) -> list[Row]:
    """Interleave ours, kubectl cp and the raw stream, ``reps`` rounds of each."""
    reps = 3 if ctx.smoke else 7
    n_files, big = (20, 1 << 20) if ctx.smoke else (200, 32 << 20)
    large = (4 << 20) if ctx.smoke else (256 << 20)
    return compare(ctx, reps, large, (n_files, big))


def compare(
    ctx: Context,
    reps: int,
    large: int,
    tree_shape: tuple[int, int] | None,
    what: str = "",
    raw_limit: float = 1.5,
    bench: str = NAME,
) -> list[Row]:
    """Upload and download of one ``large``-byte file and, unless ``tree_shape`` is None, of a
    tree of (files, big file bytes): ours, kubectl cp and the raw stream, interleaved in a
    shuffled order, ``reps`` rounds. Rows' titles start with ``what``; ours must be no slower
    than kubectl cp and, for the large file, within ``raw_limit`` x the raw stream's time."""
    sess = fixtures.session(ctx)
    if not baselines.kubectl_available():
        raise fixtures.Unavailable(
            f"{baselines.kubectl()} is not on PATH (the kubectl cp baseline)"
        )
    n_files, big = tree_shape or (1, 0)
    work = ctx.workdir / "transfer"
    tree = work / "tree"
    tree_bytes = make_tree(tree, n_files, big)
    large_file = work / "large.bin"
    with open(large_file, "wb") as fh:
        for _ in range(large >> 20 or 1):
            fh.write(os.urandom(min(large, 1 << 20)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(tree, arcname="tree")
    tree_tar = work / "tree.tar"
    tree_tar.write_bytes(buf.getvalue())
    pod, ns = sess.pod, ctx.namespace
    target = k8s.read_kubeconfig(ctx.kubeconfig)
    cache = str(ctx.workdir / "kubectl-cache")
    counter = iter(range(1_000_000))

    def fresh(kind: str) -> str:
        return f"bench-xfer/{kind}-{next(counter)}"

    sess.execute(["mkdir", "-p", "bench-xfer"])
    sess.upload(str(tree), "bench-xfer/seed-tree")  # the download source
    sess.upload(str(large_file), "bench-xfer/seed-large.bin")

    def down_dir(kind: str) -> Path:
        d = work / "down" / f"{kind}-{next(counter)}"
        d.parent.mkdir(parents=True, exist_ok=True)
        return d

    def kube_up(src: Path) -> Callable[[], None]:
        return lambda: baselines.kubectl_cp(
            ctx.kubeconfig, cache, ns, str(src), f"{pod}:{fresh('kc')}"
        )

    def kube_down(remote: str) -> Callable[[], None]:
        return lambda: baselines.kubectl_cp(
            ctx.kubeconfig, cache, ns, f"{pod}:{remote}", str(down_dir("kc"))
        )

    def ours_up(src: Path) -> Callable[[], None]:
        def go() -> None:
            r = sess.upload(str(src), fresh("ours"))
            assert r.ok and r.verified == "sha256", r

        return go

    def ours_down(remote: str) -> Callable[[], None]:
        def go() -> None:
            r = sess.download(remote, str(down_dir("ours")))
            assert r.verified == "sha256", r

        return go

    def raw_up(src: Path, argv_of: Callable[[str], list[str]]) -> Callable[[], None]:
        def go() -> None:
            r = baselines.raw_exec_stdin(target, ns, pod, argv_of(fresh("raw")), str(src))
            assert r.status and r.status.get("status") == "Success", r

        return go

    def raw_down(argv: list[str], size: int) -> Callable[[], None]:
        def go() -> None:
            r = baselines.raw_exec(target, ns, pod, argv)
            assert r.status and r.status.get("status") == "Success" and r.stdout_len >= size, r

        return go

    def untar_into(d: str) -> list[str]:
        return ["sh", "-c", 'mkdir -p -- "$1" && exec tar xf - -C "$1"', "sh", d]

    cases: dict[str, dict[str, Callable[[], None]]] = {
        "up-tree": {
            "ours": ours_up(tree),
            "kubectl": kube_up(tree),
            "raw": raw_up(tree_tar, untar_into),
        },
        "down-tree": {
            "ours": ours_down("bench-xfer/seed-tree"),
            "kubectl": kube_down("bench-xfer/seed-tree"),
            "raw": raw_down(["tar", "cf", "-", "-C", "bench-xfer", "seed-tree"], tree_bytes),
        },
        "up-large": {
            "ours": ours_up(large_file),
            "kubectl": kube_up(large_file),
            "raw": raw_up(large_file, lambda d: ["sh", "-c", 'cat > "$1"', "sh", d]),
        },
        "down-large": {
            "ours": ours_down("bench-xfer/seed-large.bin"),
            "kubectl": kube_down("bench-xfer/seed-large.bin"),
            "raw": raw_down(["cat", "bench-xfer/seed-large.bin"], large),
        },
    }
    if tree_shape is None:
        cases = {k: v for k, v in cases.items() if k.endswith("large")}
    samples = {case: {who: [] for who in fns} for case, fns in cases.items()}
    for fns in cases.values():  # warm up: TLS, kubectl's discovery cache
        for fn in fns.values():
            fn()
    for _ in range(reps):
        for case, fns in cases.items():
            order = list(fns.items())
            random.shuffle(order)
            for who, fn in order:
                t0 = time.perf_counter()
                fn()
                samples[case][who].append(time.perf_counter() - t0)
            sess.execute(["sh", "-c", "rm -rf bench-xfer/kc-* bench-xfer/ours-* bench-xfer/raw-*"])
            shutil.rmtree(work / "down", ignore_errors=True)
    sess.execute(["rm", "-rf", "bench-xfer"])
    tree_what = f"tree of {n_files} files + {big >> 20} MB"
    sizes = {"tree": tree_bytes, "large": large}
    rows = []
    for case, label in (
        ("up-tree", f"Upload: {tree_what}"),
        ("down-tree", f"Download: {tree_what}"),
        ("up-large", f"Upload: one {large >> 20} MB file"),
        ("down-large", f"Download: one {large >> 20} MB file"),
    ):
        if case not in samples:
            continue
        if what:  # "Real stack: upload: ..."
            label = what + label[0].lower() + label[1:]
        st = {k: Stats(v) for k, v in samples[case].items()}
        nbytes = sizes[case.split("-")[1]]
        ours, kube, raw = st["ours"], st["kubectl"], st["raw"]
        vs_kube = kube.median / ours.median
        vs_raw = ours.median / raw.median
        goal = "no slower than kubectl cp (median)"
        ok = vs_kube >= 1.0
        if case.endswith("large"):
            goal += f"; within {raw_limit:g}x of the raw stream"
            ok = ok and vs_raw <= raw_limit
        rows.append(
            Row(
                f"{label}, sha256-verified (n={reps})",
                f"{med_range(ours, secs)} ({_mbps(nbytes, ours)})",
                f"`kubectl cp`: {med_range(kube, secs)}",
                f"{ratio(vs_kube)} kubectl cp's speed; {vs_raw:.2f}x the raw stream's time",
                goal,
                yes_no(ok),
                bench=bench,
                floor=f"raw exec stream: {med_range(raw, secs)} ({_mbps(nbytes, raw)})",
            )
        )
    return rows
