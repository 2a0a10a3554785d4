"""Worker of the recorded torchrun runs (tests/unit/data/torchrun/README.md)."""

import os
import sys
import time

scenario = sys.argv[1]
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
out, err = sys.stdout, sys.stderr
if scenario == "exit3":  # rank 2 exits 3, the others end later
    print(f"rank {rank} local {local} of {os.environ['WORLD_SIZE']}", flush=True)
    print(f"stderr of {rank}", file=err, flush=True)
    if rank == 2:
        time.sleep(0.5)
        print("last words of 2", flush=True)
        sys.exit(3)
    time.sleep(2)
    print(f"done {rank}", flush=True)
elif scenario == "ok":
    print(f"rank {rank} local {local} of {os.environ['WORLD_SIZE']}", flush=True)
    print(f"stderr of {rank}", file=err, flush=True)
elif scenario == "sigkill":  # rank 1 killed by SIGKILL
    print(f"rank {rank} up", flush=True)
    if rank == 1:
        time.sleep(0.5)
        print("about to die", flush=True)
        os.kill(os.getpid(), 9)
    time.sleep(2)
elif scenario == "raise":  # rank 3 raises under @record: its error file gives the traceback
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        print(f"rank {rank} up", flush=True)
        if rank == 3:
            time.sleep(0.3)
            raise ValueError("bad batch 17")
        time.sleep(2)

    main()
elif scenario == "partial":  # lines cut by the tail's reads, \r, long lines, no final newline
    stream = out if rank == 0 else err
    for piece, pause in [
        (f"abc{rank}", 0.35),
        (f"def{rank}\nghi{rank}", 0.35),
        ("\rcr\r\nend\n", 0),
        ("x" * 9000 + "\n", 0),
        ("y" * 70000 + "\n", 0),
        ("é ü\n", 0),
        (f"tail{rank}", 0),
    ]:
        stream.write(piece)
        stream.flush()
        time.sleep(pause)
