#!/usr/bin/python3
"""py_bench - the Python binding against the C client and against redis-py,
in one run, on one cluster.

    PYTHONPATH=build/python /usr/bin/python3 perf/py_bench.py
        [--threads 4] [--duration 2] [--warmup 0.5] [--reps 3]
        [--segment-size 4G] [--build build] [--no-redis] [--no-c]

Starts a mooncake-master and one mooncake-store-server (--segment-size,
over tcp, on free ports), then for every point runs, on that cluster:
  - C:      build/store_bench --master ... (the same sizes, threads, batch),
  - Python: mooncake.store with --threads threads sharing one client, each
            doing sync calls one after the other (as store_bench's threads),
and, against a redis-server started without persistence (--save ""
--appendonly no) on a free port, redis-py SET/GET with the same threads
(one connection each) and sizes.

Points: put and get of 4 KiB and 1 MiB values (Python put() of bytes, get
into a registered buffer with get_into(); store_bench put/get), batch get
of 64 x 4 KiB (batch_get_into; store_bench batch_get --registered), and
get() returning bytes of 1 MiB (against store_bench get 1 MiB).

Each point, --reps times: Python, C and redis-py one after the other, each
a warm-up run and a timed run of --duration seconds (a put run also stops
once it filled half the capacity; objects are removed between runs), so a
load that changes during the run affects the three alike; the median run's
calls/s and GB/s (value bytes, 1 GB = 1e9 B) of each. Prints the table, the ratios and the targets of the Python issue:
Python >= 0.9 x C for 1 MiB and batch calls, >= 0.8 x C for 4 KiB single
calls; mooncake put/get 1 MiB >= 1.5 x redis-py SET/GET. "csv,py_bench,..."
lines follow the table.

The machine's load matters: run it on a quiet machine for figures.
"""

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from mooncake.store import MooncakeDistributedStore

KIB, MIB = 1 << 10, 1 << 20
GET_KEYS = 64  # keys read by get runs (as store_bench)
FILL = 0.5  # share of the capacity one put run may fill


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_line(path, regex, proc, timeout=20):
    pat = re.compile(regex)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                m = pat.search(f.read())
            if m:
                return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit(f"py_bench: {regex!r} not seen in {path}")


class Cluster:
    def __init__(self, build, segment, tmp):
        self.procs = []
        mlog = os.path.join(tmp, "master.log")
        m = subprocess.Popen([os.path.join(build, "mooncake-master"), "--set",
                              "server.bind_address=127.0.0.1", "--set", "server.rpc_port=0",
                              "--set", "server.http_port=0", "--set", "log.level=warn,master=info"],
                             stdout=subprocess.DEVNULL, stderr=open(mlog, "w"))
        self.procs.append(m)
        g = wait_line(mlog, r"ready: rpc ([^ ,]+:\d+)", m)
        self.master = g.group(1)
        nout = os.path.join(tmp, "node.out")
        n = subprocess.Popen([os.path.join(build, "mooncake-store-server"),
                              "--set", f"store.master={self.master}",
                              "--set", f"store.global_segment_size={segment}",
                              "--set", "log.level=warn"],
                             stdout=open(nout, "w"), stderr=open(os.path.join(tmp, "node.log"), "w"))
        self.procs.append(n)
        wait_line(nout, r"^ready ", n, timeout=180)  # the segment is pre-faulted first

    def stop(self):
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


# ------------------------------------------------------------------- runs

def timed(threads, body, duration):
    """Run body(t, stop_at) in `threads` threads; each returns (calls, bytes).
    -> (calls/s, bytes/s) over the wall time of the run."""
    out = [None] * threads
    barrier = threading.Barrier(threads + 1)

    def run(t):
        barrier.wait()
        out[t] = body(t, stop_at[0])

    stop_at = [0.0]
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    stop_at[0] = time.monotonic() + duration
    t0 = time.monotonic()
    barrier.wait()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    calls = sum(o[0] for o in out)
    nbytes = sum(o[1] for o in out)
    return calls / wall, nbytes / wall


def median_run(args, body, before=None):
    if before:
        before()
    timed(args.threads, body, args.warmup)
    runs = []
    for _ in range(args.reps):
        if before:
            before()
        runs.append(timed(args.threads, body, args.duration))
    runs.sort()
    return runs[len(runs) // 2]


class PyBench:
    def __init__(self, args, master):
        self.args = args
        self.s = MooncakeDistributedStore()
        rc = self.s.setup("127.0.0.1", "master", 0, 64 * MIB, "tcp", "", master)
        if rc != 0:
            sys.exit(f"py_bench: setup: {rc}")
        self.capacity = args.segment_bytes
        self.bufs = []

    def registered(self, n):
        a = np.zeros(n, dtype=np.uint8)
        if self.s.register_buffer(a.ctypes.data, n) != 0:
            sys.exit("py_bench: register_buffer failed")
        self.bufs.append(a)
        return a

    def clear(self):
        self.s.remove_all(force=True)

    def put(self, size):
        value = os.urandom(size)
        budget = max(1, int(self.capacity * FILL / size / self.args.threads))
        run_id = [0]

        def body(t, stop_at):
            run_id[0] += 1
            n = 0
            prefix = f"py/put/{size}/{run_id[0]}/{t}/"
            put = self.s.put
            while n < budget and time.monotonic() < stop_at:
                if put(prefix + str(n), value) != 0:
                    raise SystemExit("py_bench: put failed")
                n += 1
            return n, n * size
        return median_run(self.args, body, self.clear)

    def preload(self, size, n=GET_KEYS):
        self.clear()
        v = os.urandom(size)
        keys = [f"py/get/{size}/{i}" for i in range(n)]
        for k in keys:
            if self.s.put(k, v) != 0:
                sys.exit("py_bench: preload failed")
        return keys

    def get_into(self, size):
        keys = self.preload(size)
        bufs = [self.registered(size) for _ in range(self.args.threads)]

        def body(t, stop_at):
            n, p, get_into = 0, bufs[t].ctypes.data, self.s.get_into
            while time.monotonic() < stop_at:
                if get_into(keys[(t + n) % len(keys)], p, size) != size:
                    raise SystemExit("py_bench: get_into failed")
                n += 1
            return n, n * size
        return median_run(self.args, body)

    def get_bytes(self, size):
        keys = self.preload(size)

        def body(t, stop_at):
            n, get = 0, self.s.get
            while time.monotonic() < stop_at:
                if len(get(keys[(t + n) % len(keys)])) != size:
                    raise SystemExit("py_bench: get failed")
                n += 1
            return n, n * size
        return median_run(self.args, body)

    def batch_get_into(self, size, batch):
        keys = self.preload(size, max(GET_KEYS, batch))
        per = []
        for _ in range(self.args.threads):
            a = self.registered(size * batch)
            per.append(([a.ctypes.data + i * size for i in range(batch)], [size] * batch))

        def body(t, stop_at):
            n, (ptrs, sizes), bget = 0, per[t], self.s.batch_get_into
            ks = keys[:batch]
            while time.monotonic() < stop_at:
                r = bget(ks, ptrs, sizes)
                if r[0] != size:
                    raise SystemExit(f"py_bench: batch_get_into failed: {r[0]}")
                n += 1
            return n, n * size * batch
        return median_run(self.args, body)

    def close(self):
        self.clear()
        for a in self.bufs:
            self.s.unregister_buffer(a.ctypes.data)
        self.s.close()


def c_bench(args, master, op, size, registered=False):
    """store_bench against the same cluster: (calls/s, bytes/s) of its median run."""
    cmd = [os.path.join(args.build, "store_bench"), "--master", master, "--mode", "remote",
           "--ops", op, "--sizes", str(size), "--concurrency", str(args.threads),
           "--batch", "64", "--duration", str(args.duration), "--warmup", str(args.warmup),
           "--reps", str(args.reps), "--segment-size", str(args.segment_bytes)]
    if registered:
        cmd.append("--registered")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in r.stdout.splitlines():
        if line.startswith("csv,store_bench,"):
            f = line.split(",")
            return float(f[8]), float(f[10]) * 1e9
    sys.exit(f"py_bench: store_bench gave no result:\n{r.stdout}\n{r.stderr}")


class Redis:
    def __init__(self, tmp):
        import redis
        self.redis = redis
        for _ in range(20):
            self.port = free_port()
            self.p = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind",
                                       "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                                       tmp, "--proto-max-bulk-len", "1gb"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(100):
                try:
                    redis.Redis(port=self.port).ping()
                    return
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
            self.p.kill()
        sys.exit("py_bench: redis-server did not start")

    def bench(self, args, op, size):
        clients = [self.redis.Redis(port=self.port) for _ in range(args.threads)]
        value = os.urandom(size)
        keys = [f"r/{size}/{i}" for i in range(GET_KEYS)]
        for k in keys:
            clients[0].set(k, value)

        def body(t, stop_at):
            c, n = clients[t], 0
            f = c.set if op == "set" else c.get
            while time.monotonic() < stop_at:
                k = keys[(t + n) % len(keys)]
                if op == "set":
                    f(k, value)
                elif len(f(k)) != size:
                    raise SystemExit("py_bench: redis GET failed")
                n += 1
            return n, n * size
        return median_run(args, body)

    def stop(self):
        self.p.terminate()
        self.p.wait(10)


def human(n):
    return f"{n >> 20}MiB" if n >= MIB else f"{n >> 10}KiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--segment-size", default="4G")
    ap.add_argument("--build", default="build")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--no-c", action="store_true")
    args = ap.parse_args()
    m = re.fullmatch(r"(\d+)([KMG]?)", args.segment_size)
    if not m:
        sys.exit("py_bench: --segment-size like 4G")
    args.segment_bytes = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]

    tmp = tempfile.mkdtemp(prefix="py_bench.")
    os.environ.setdefault("MC_LOG_LEVEL", "warn")
    os.environ.setdefault("MC_STORE_HTTP_PORT", "0")  # several nodes: free HTTP ports
    cluster = Cluster(args.build, args.segment_bytes, tmp)
    redis = None
    rows = []  # (point, python (calls/s, B/s), C, redis, target ratio vs C)
    try:
        py = PyBench(args, cluster.master)
        points = [
            ("put 4KiB", lambda: py.put(4 * KIB), ("put", 4 * KIB, False), "set", 4 * KIB, 0.8),
            ("get 4KiB (get_into)", lambda: py.get_into(4 * KIB), ("get", 4 * KIB, False), "get",
             4 * KIB, 0.8),
            ("put 1MiB", lambda: py.put(MIB), ("put", MIB, False), "set", MIB, 0.9),
            ("get 1MiB (get_into)", lambda: py.get_into(MIB), ("get", MIB, False), "get", MIB,
             0.9),
            ("batch_get_into 64x4KiB", lambda: py.batch_get_into(4 * KIB, 64),
             ("batch_get", 4 * KIB, True), None, 0, 0.9),
            ("get 1MiB -> bytes", lambda: py.get_bytes(MIB), ("get", MIB, False), None, 0, 0.9),
        ]
        if not args.no_redis:
            redis = Redis(tmp)
        # the three are interleaved run by run (each its warm-up, then one
        # timed run), so a load that drifts during the run hits them alike;
        # medians over --reps
        reps, args.reps = args.reps, 1
        for name, pyfn, cargs, rop, rsize, target in points:
            ps, cs, rs = [], [], []
            for _ in range(reps):
                ps.append(pyfn())
                if not args.no_c:
                    cs.append(c_bench(args, cluster.master, *cargs))
                if redis is not None and rop:
                    rs.append(redis.bench(args, rop, rsize))
            med = lambda v: sorted(v)[len(v) // 2] if v else None  # noqa: E731
            rows.append((name, med(ps), med(cs), med(rs), target))
            print(f"  measured {name}", file=sys.stderr, flush=True)
        args.reps = reps
        py.close()
    finally:
        if redis is not None:
            redis.stop()
        cluster.stop()

    print(f"py_bench: {args.threads} threads, {args.reps} reps of {args.duration}s (median), "
          f"one storage node over tcp, loopback")
    print(f"{'point':<24} {'python calls/s':>14} {'GB/s':>7} {'C calls/s':>11} {'GB/s':>7} "
          f"{'py/C':>6} {'target':>7} {'redis-py/s':>11} {'mc/redis':>9}")
    verdicts = []
    for name, p, c, r, target in rows:
        ratio = p[0] / c[0] if c else float("nan")
        rr = p[0] / r[0] if r else float("nan")
        ok = "met" if c and ratio >= target else "MISSED" if c else "-"
        print(f"{name:<24} {p[0]:>14.0f} {p[1] / 1e9:>7.3f} "
              f"{(c[0] if c else 0):>11.0f} {(c[1] / 1e9 if c else 0):>7.3f} {ratio:>6.2f} "
              f"{'>=' + str(target) + ' ' + ok:>7} {(r[0] if r else 0):>11.0f} {rr:>9.2f}")
        if c:
            verdicts.append((f"{name}: python/C {ratio:.2f} (target >= {target})", ratio >= target))
        if r and "1MiB" in name and "bytes" not in name:
            verdicts.append((f"{name}: mooncake/redis-py {rr:.2f} (target >= 1.5)", rr >= 1.5))
    for name, p, c, r, target in rows:
        print(f"csv,py_bench,{name},{p[0]:.0f},{p[1] / 1e9:.4f},"
              f"{(c[0] if c else 0):.0f},{(c[1] / 1e9 if c else 0):.4f},"
              f"{(r[0] if r else 0):.0f},{(r[1] / 1e9 if r else 0):.4f}")
    print("targets:")
    for v, ok in verdicts:
        print(f"  {'met   ' if ok else 'MISSED'} {v}")


if __name__ == "__main__":
    main()
