"""pagepipe.Pipe and pagepipe.Queue beside multiprocessing.Pipe, multiprocessing.Queue and
faster-fifo, in one run.

    flock /tmp/pagepipe-cpu.lock python bench_mp.py --rounds 3 [--busy 2]

Scenarios (processes started with fork, timed from a barrier after all have started until
every consumer has its last message):
- pipe, 1 -> 1: one producer process, one consumer process, over Pipe(duplex=False):
  pagepipe.Pipe vs multiprocessing.Pipe, objects (send/recv) and raw bytes
  (send_bytes/recv_bytes), 100 B and 1 MiB.
- queue, 1 -> 1 and 4 -> 4: put/get of pickled objects (a tuple of an int and bytes, 100 B or
  1 MiB pickled): pagepipe.Queue vs multiprocessing.Queue vs faster_fifo.Queue (its put/get).
- queue put_many/get_many, 1 -> 1 and 4 -> 4, 100 B objects: producers put_many --batch
  (100) objects at a time, consumers get_many at most that many: pagepipe.Queue vs
  faster_fifo.Queue (multiprocessing.Queue has no such calls).
Each round runs every transport once per scenario, back to back; the ratios are of the medians
over rounds, with the range of the per-round ratios. --busy N starts N busy loops
(`sh -c 'while :; do :; done'`) for the whole run. Every message's size is checked.

--baseline DIR adds another build of pagepipe to the same run (DIR holds its `pagepipe`
package, e.g. a wheel of an earlier commit unzipped there), as `baseline.Pipe` and
`baseline.Queue`, so that a change is measured against what it changed under the same load;
--only WORD keeps the scenarios whose label has WORD (`queue`, `1 MiB`, ...).
"""

import argparse
import atexit
import importlib
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import pagepipe

try:
    import faster_fifo
    import faster_fifo_reduction  # noqa: F401  (lets faster-fifo queues pickle to children)
except ImportError:
    faster_fifo = None

CTX = mp.get_context("fork")
SMALL, BIG = 100, 1 << 20
#: Another build of pagepipe (--baseline), imported as pagepipe_baseline.
baseline = None


def load_baseline(path):
    # A copy of DIR/pagepipe under another name (its imports are relative), beside this one.
    tmp = tempfile.mkdtemp(prefix="pagepipe-baseline-")
    atexit.register(shutil.rmtree, tmp, True)
    shutil.copytree(os.path.join(path, "pagepipe"), os.path.join(tmp, "pagepipe_baseline"))
    sys.path.insert(0, tmp)
    return importlib.import_module("pagepipe_baseline")


def payload_obj(size):
    # (int, bytes) pickles to `size` bytes (the pickle framing is about 20 bytes).
    return (7, b"x" * max(0, size - 22))


# -- workers --

def pipe_producer(conn, n, raw, size, barrier):
    obj = payload_obj(size)
    data = b"y" * size
    barrier.wait()
    if raw:
        for _ in range(n):
            conn.send_bytes(data)
    else:
        for _ in range(n):
            conn.send(obj)


def pipe_consumer(conn, n, raw, size, barrier):
    want = len(payload_obj(size)[1])
    barrier.wait()
    if raw:
        for _ in range(n):
            assert len(conn.recv_bytes()) == size
    else:
        for _ in range(n):
            assert len(conn.recv()[1]) == want


def queue_producer(q, n, size, barrier):
    obj = payload_obj(size)
    barrier.wait()
    for _ in range(n):
        q.put(obj)


def queue_consumer(q, n, size, barrier):
    want = len(payload_obj(size)[1])
    barrier.wait()
    for _ in range(n):
        assert len(q.get(timeout=120)[1]) == want


def queue_producer_many(q, n, size, barrier, batch):
    obj = payload_obj(size)
    objs = [obj] * batch
    barrier.wait()
    for i in range(0, n, batch):
        q.put_many(objs[:min(batch, n - i)])


def queue_consumer_many(q, n, size, barrier, batch):
    want = len(payload_obj(size)[1])
    barrier.wait()
    got = 0
    while got < n:
        msgs = q.get_many(timeout=120, max_messages_to_get=min(batch, n - got))
        for m in msgs:
            assert len(m[1]) == want
        got += len(msgs)


# -- one timed run --

def run(procs, barrier):
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.perf_counter()
    failed = None
    for p in procs:
        p.join(600)
        if p.exitcode != 0:
            failed = p.exitcode
            for q in procs:  # the others may wait forever for what the failed one holds
                q.kill()
    if failed is not None:
        for p in procs:
            p.join()
        raise RuntimeError(f"a worker failed: exit code {failed}")
    return time.perf_counter() - t0


def run_pipe(kind, n, raw, size):
    if kind == "pagepipe.Pipe":
        r, w = pagepipe.Pipe(duplex=False)
    elif kind == "baseline.Pipe":
        r, w = baseline.Pipe(duplex=False)
    else:
        r, w = CTX.Pipe(duplex=False)
    barrier = CTX.Barrier(3)
    procs = [CTX.Process(target=pipe_producer, args=(w, n, raw, size, barrier)),
             CTX.Process(target=pipe_consumer, args=(r, n, raw, size, barrier))]
    t = run(procs, barrier)
    r.close()
    w.close()
    return n / t


def make_queue(kind):
    if kind == "pagepipe.Queue":
        return pagepipe.Queue(ctx=CTX)
    if kind == "baseline.Queue":
        return baseline.Queue(ctx=CTX)
    if kind == "multiprocessing.Queue":
        return CTX.Queue()
    return faster_fifo.Queue(max_size_bytes=64 << 20)


def run_queue(kind, n, size, nprod, batch=None):
    q = make_queue(kind)
    barrier = CTX.Barrier(2 * nprod + 1)
    per = n // nprod
    if batch is None:
        prod, cons, extra = queue_producer, queue_consumer, ()
    else:
        prod, cons, extra = queue_producer_many, queue_consumer_many, (batch,)
    procs = [CTX.Process(target=prod, args=(q, per, size, barrier, *extra))
             for _ in range(nprod)]
    procs += [CTX.Process(target=cons, args=(q, per, size, barrier, *extra))
              for _ in range(nprod)]
    t = run(procs, barrier)
    if hasattr(q, "close"):
        q.close()
    return per * nprod / t


# -- the plan --

def scenarios(args):
    pipes = ["pagepipe.Pipe"] + (["baseline.Pipe"] if baseline else []) + ["multiprocessing.Pipe"]
    queues = (["pagepipe.Queue"] + (["baseline.Queue"] if baseline else [])
              + ["multiprocessing.Queue"] + (["faster-fifo"] if faster_fifo else []))
    out = []
    for raw in (False, True):
        for size, n in ((SMALL, args.small), (BIG, args.big)):
            label = f"pipe 1->1 {'bytes' if raw else 'objects'} {'100 B' if size == SMALL else '1 MiB'}"
            out.append((label, [(k, lambda k=k, n=n, raw=raw, size=size: run_pipe(k, n, raw, size))
                                for k in pipes]))
    for nprod in (1, 4):
        for size, n in ((SMALL, args.small), (BIG, args.big)):
            label = f"queue {nprod}->{nprod} objects {'100 B' if size == SMALL else '1 MiB'}"
            out.append((label, [(k, lambda k=k, n=n, size=size, nprod=nprod: run_queue(k, n, size, nprod))
                                for k in queues]))
    # put_many/get_many, batches of args.batch: pagepipe.Queue vs faster-fifo's (the build
    # of --baseline may predate them; multiprocessing.Queue has none).
    many = ["pagepipe.Queue"] + (["faster-fifo"] if faster_fifo else [])
    for nprod in (1, 4):
        label = f"queue {nprod}->{nprod} objects 100 B put_many/get_many"
        out.append((label, [(k, lambda k=k, nprod=nprod: run_queue(k, args.small, SMALL, nprod,
                                                                    args.batch))
                            for k in many]))
    return [(label, runs) for label, runs in out if not args.only or args.only in label]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="busy loops to run meanwhile")
    ap.add_argument("--small", type=int, default=40_000, help="100 B messages per run")
    ap.add_argument("--big", type=int, default=400, help="1 MiB messages per run")
    ap.add_argument("--baseline", metavar="DIR", help="another pagepipe build to run beside")
    ap.add_argument("--only", metavar="WORD", help="only the scenarios whose label has WORD")
    ap.add_argument("--batch", type=int, default=100,
                    help="messages per put_many and at most per get_many (their scenarios)")
    args = ap.parse_args()
    global baseline
    if args.baseline:
        baseline = load_baseline(args.baseline)
    busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.busy)]
    try:
        plan = scenarios(args)
        results = {label: {k: [] for k, _ in runs} for label, runs in plan}
        print(f"{os.cpu_count()} CPUs, {args.busy} busy loops, {args.rounds} rounds, "
              f"Python {sys.version.split()[0]}, faster-fifo "
              f"{'yes' if faster_fifo else 'not installed'}", flush=True)
        for rnd in range(args.rounds):
            for label, runs in plan:
                order = runs if rnd % 2 == 0 else runs[::-1]
                for k, fn in order:
                    try:
                        results[label][k].append(fn())
                    except Exception as e:  # a transport that fails is reported, not fatal
                        print(f"round {rnd + 1} {label}: {k} FAILED: {e}", flush=True)
                        results[label][k].append(float("nan"))
                line = "  ".join(f"{k} {results[label][k][-1]:,.0f}/s" for k, _ in runs)
                print(f"round {rnd + 1} {label}: {line}", flush=True)
        print("\nmedian messages/s, and pagepipe's ratio to each (per-round range):")
        for label, runs in plan:
            ours = runs[0][0]
            med = {k: statistics.median([x for x in v if x == x] or [float("nan")])
                   for k, v in results[label].items()}
            parts = [f"{k} {med[k]:,.0f}" for k, _ in runs]
            print(f"{label}: " + ", ".join(parts))
            for k, _ in runs[1:]:
                per = [a / b for a, b in zip(results[label][ours], results[label][k])
                       if a == a and b == b] or [float("nan")]
                failed = sum(x != x for x in results[label][k])
                if failed:
                    print(f"    ({k} failed in {failed} of {args.rounds} rounds)")
                print(f"    {ours} / {k}: {med[ours] / med[k]:.2f}x "
                      f"({min(per):.2f}-{max(per):.2f}x)")
    finally:
        for p in busy:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
