"""Communication overlapped with computation: what a training step sees when a collective runs
beside GEMMs (FSDP gathering the next layer while the current one computes; tensor and sequence
parallelism). Run under torchrun on one host, once per library (bench/overlap.sh runs both, with
each CTA policy, and prints the side-by-side table):

    torchrun --nproc-per-node 2 bench/overlap.py --out nccl.json
    LD_PRELOAD=target/release/liboxccl.so torchrun --nproc-per-node 2 bench/overlap.py --out oxccl.json

Per case (a collective and a size): the compute alone (--gemms bfloat16 GEMMs of --dim^3 on a
stream of their own), the collective alone (on the process group's stream), and both started
together (the time until both are done), each the median of --iters iterations after a warm-up,
in microseconds; the compute alone and the pair run alternately, so that clock drift enters both. A perfect overlap takes max(compute, communication); one after the other takes
their sum. "blocks": the largest grid (blocks) of the library's kernels in one collective alone,
read from a torch.profiler trace (0 where the collective ran on copy engines only, "-" where the
trace had no kernel names to tell).

Sizes are the collective's whole message: AllReduce's buffer, AllGather's output, ReduceScatter's
input, AlltoAll's buffer on each rank. Every result is compared with its exact expected value (small integers) after the timing:
a wrong element fails the run.
"""

import argparse
import json
import os
import tempfile

import torch
import torch.distributed as dist

COLLS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


def fill(numel, rank, dev):
    # Small integers: float32 sums over ranks stay exact.
    i = torch.arange(numel, device=dev, dtype=torch.int64)
    return ((i * 7 + rank * 5) % 13).to(torch.float32)


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


class Case:
    def __init__(self, coll, nbytes, rank, world, dev):
        self.coll, self.rank, self.world = coll, rank, world
        n = nbytes // 4
        if coll == "all_gather":
            self.inp = fill(n // world, rank, dev)
            self.out = torch.empty(n, device=dev, dtype=torch.float32)
        elif coll == "reduce_scatter":
            self.inp = fill(n, rank, dev)
            self.out = torch.empty(n // world, device=dev, dtype=torch.float32)
        elif coll == "all_to_all":
            self.inp = fill(n, rank, dev)
            self.out = torch.empty(n, device=dev, dtype=torch.float32)
        else:
            self.inp = fill(n, rank, dev)
            self.out = self.inp

    def run(self):
        if self.coll == "all_gather":
            dist.all_gather_into_tensor(self.out, self.inp)
        elif self.coll == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.inp)
        elif self.coll == "all_to_all":
            dist.all_to_all_single(self.out, self.inp)
        else:
            dist.all_reduce(self.inp)

    def check(self):
        """Runs once more from fresh inputs and compares with the exact result."""
        dev = self.inp.device
        w = self.world
        if self.coll == "all_gather":
            self.inp.copy_(fill(self.inp.numel(), self.rank, dev))
            self.run()
            want = torch.cat([fill(self.inp.numel(), r, dev) for r in range(w)])
        elif self.coll == "reduce_scatter":
            self.inp.copy_(fill(self.inp.numel(), self.rank, dev))
            self.run()
            full = sum(fill(self.inp.numel(), r, dev) for r in range(w))
            k = self.out.numel()
            want = full[self.rank * k:(self.rank + 1) * k]
        elif self.coll == "all_to_all":
            self.inp.copy_(fill(self.inp.numel(), self.rank, dev))
            self.run()
            k = self.inp.numel() // w
            # Piece r of this rank's output is piece `rank` of rank r's input.
            want = torch.cat([fill(self.inp.numel(), r, dev)[self.rank * k:(self.rank + 1) * k] for r in range(w)])
        else:
            self.inp.copy_(fill(self.inp.numel(), self.rank, dev))
            self.run()
            want = sum(fill(self.inp.numel(), r, dev) for r in range(w))
        torch.cuda.synchronize()
        return int((self.out != want).sum().item())


def kernel_blocks(fn):
    """The largest grid of the non-GEMM kernels fn launches, from a profiler trace."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)
            events = json.load(open(path)).get("traceEvents", [])
        most = 0
        for e in events:
            if e.get("cat") != "kernel":
                continue
            g = e.get("args", {}).get("grid")
            if isinstance(g, list) and len(g) == 3:
                most = max(most, g[0] * g[1] * g[2])
        return most
    except Exception:  # noqa: BLE001 - the column is informative only
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16M,64M,256M", help="message sizes (K/M suffixes)")
    ap.add_argument("--colls", default=",".join(COLLS))
    ap.add_argument("--gemms", type=int, default=6)
    ap.add_argument("--dim", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)

    x = torch.randn(a.dim, a.dim, device=dev, dtype=torch.bfloat16)
    y = torch.randn(a.dim, a.dim, device=dev, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    compute = torch.cuda.Stream()
    comm = torch.cuda.Stream()

    def gemms():
        with torch.cuda.stream(compute):
            for _ in range(a.gemms):
                torch.matmul(x, y, out=z)

    def once(work, streams):
        """us from an event on the current stream until every stream in `streams` is done."""
        dist.barrier()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for s in streams:
            s.wait_event(start)
        work()
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0

    def timed(work, streams):
        """The median of --iters runs of `work` after two warm-ups, in us."""
        return median([once(work, streams) for it in range(a.iters + 2)][2:])

    def timed_pair(first, second, streams):
        """Medians of `first` and `second` run alternately: the GEMMs alone and the pair beside
        each other, so that the GPU's clock drift over a run (the GEMMs alone moved by up to 14%
        between cases of one run) enters both alike."""
        t = [(once(first, [compute]), once(second, streams)) for it in range(a.iters + 2)][2:]
        return median([x for x, _ in t]), median([y for _, y in t])

    def parse(s):
        m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)

    results = {"compute_us": timed(gemms, [compute]), "cases": {}}
    bad = 0
    for coll in a.colls.split(","):
        for size in a.sizes.split(","):
            c = Case(coll, parse(size), rank, world, dev)

            def comm_only():
                with torch.cuda.stream(comm):
                    c.run()

            def both():
                gemms()
                comm_only()

            alone = timed(comm_only, [comm])
            compute_here, together = timed_pair(gemms, both, [compute, comm])
            blocks = kernel_blocks(comm_only)
            wrong = c.check()
            bad += wrong
            results["cases"][f"{coll} {size}"] = {"comm_us": alone, "compute_us": compute_here, "together_us": together, "blocks": blocks, "wrong": wrong}
            if rank == 0:
                print(f"{coll} {size}: comm {alone:.0f} us, together {together:.0f} us, blocks {blocks}, wrong {wrong}", flush=True)
    gathered = [None] * world
    dist.all_gather_object(gathered, bad)
    if rank == 0:
        results["compute_alone_note"] = f"{a.gemms} GEMMs of {a.dim}^3 bfloat16"
        json.dump(results, open(a.out, "w"), indent=1)
    dist.destroy_process_group()
    if sum(gathered):
        raise SystemExit(f"{sum(gathered)} wrong elements")


if __name__ == "__main__":
    main()
