"""PyTorch's grouped (coalesced) operations, timed and checked: what DDP, FSDP and pipeline
schedules issue as one ncclGroupStart/End.

Run under torchrun on one host, once per library (bench/torch-coalesced.sh runs both and prints
the side-by-side table):

    torchrun --nproc-per-node 2 bench/torch_coalesced.py --out nccl.json
    LD_PRELOAD=target/release/liboxccl.so torchrun --nproc-per-node 2 bench/torch_coalesced.py --out oxccl.json

Cases (float32; sizes drawn log-uniformly with a fixed seed, the same on every rank and run):
- allreduce_coalesced-N: N all_reduce calls of 256 to 64 Ki elements in one coalescing manager
  (torch.distributed.all_reduce_coalesced's and DDP's shape), N = 16, 64, 256;
- allgather_coalesced-N / reducescatter_coalesced-N: all_gather_into_tensor /
  reduce_scatter_tensor under the coalescing manager (FSDP's), N = 16, 64;
- batch_isend_irecv-N: N operations (each rank sends N/2 tensors to and receives N/2 from its ring
  neighbours) of 1 Ki to 64 Ki elements, N = 8, 32, 64.

Every result is compared with its exact expected value (inputs are small integers, so float sums
are exact): a wrong element fails the run. Times are the median over --iters timed iterations of one
whole coalesced group (CUDA events around it), in microseconds.
"""

import argparse
import json
import math
import os
import random

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _coalescing_manager


def sizes(n, lo, hi, seed):
    rnd = random.Random(seed)
    return [int(math.exp(rnd.uniform(math.log(lo), math.log(hi)))) for _ in range(n)]


def fill(numel, rank, salt, dev):
    # Small integers: sums over ranks stay exact in float32.
    i = torch.arange(numel, device=dev, dtype=torch.int64)
    return ((i * 7 + salt * 3 + rank * 5) % 13).to(torch.float32)


def timed(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def case_allreduce(n, rank, world, dev):
    ss = sizes(n, 256, 64 << 10, 100 + n)
    ins = [fill(s, rank, k, dev) for k, s in enumerate(ss)]
    bufs = [t.clone() for t in ins]

    def run():
        with _coalescing_manager(device=dev):
            for b in bufs:
                dist.all_reduce(b)

    def check():
        for b, t in zip(bufs, ins):
            b.copy_(t)
        run()
        for k, (b, s) in enumerate(zip(bufs, ss)):
            want = sum(fill(s, r, k, dev) for r in range(world))
            if not torch.equal(b, want):
                return f"tensor {k} of {s} elements: {(b != want).sum().item()} wrong"
        return None

    return run, check, sum(ss) * 4


def case_allgather(n, rank, world, dev):
    ss = sizes(n, 256, 64 << 10, 200 + n)
    ins = [fill(s, rank, k, dev) for k, s in enumerate(ss)]
    outs = [torch.empty(s * world, device=dev) for s in ss]

    def run():
        with _coalescing_manager(device=dev):
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)

    def check():
        run()
        for k, (o, s) in enumerate(zip(outs, ss)):
            want = torch.cat([fill(s, r, k, dev) for r in range(world)])
            if not torch.equal(o, want):
                return f"tensor {k} of {s} elements: {(o != want).sum().item()} wrong"
        return None

    return run, check, sum(ss) * 4 * world


def case_reducescatter(n, rank, world, dev):
    ss = sizes(n, 256, 64 << 10, 300 + n)
    ins = [fill(s * world, rank, k, dev) for k, s in enumerate(ss)]
    outs = [torch.empty(s, device=dev) for s in ss]

    def run():
        with _coalescing_manager(device=dev):
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i)

    def check():
        run()
        for k, (o, s) in enumerate(zip(outs, ss)):
            want = sum(fill(s * world, r, k, dev) for r in range(world))[rank * s:(rank + 1) * s]
            if not torch.equal(o, want):
                return f"tensor {k} of {s} elements: {(o != want).sum().item()} wrong"
        return None

    return run, check, sum(ss) * 4 * world


def case_p2p(n, rank, world, dev):
    ss = sizes(n // 2, 1 << 10, 64 << 10, 400 + n)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    ins = [fill(s, rank, k, dev) for k, s in enumerate(ss)]
    outs = [torch.empty(s, device=dev) for s in ss]

    def run():
        ops = []
        for i, o in zip(ins, outs):
            ops.append(dist.P2POp(dist.isend, i, nxt))
            ops.append(dist.P2POp(dist.irecv, o, prv))
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    def check():
        run()
        for k, (o, s) in enumerate(zip(outs, ss)):
            want = fill(s, prv, k, dev)
            if not torch.equal(o, want):
                return f"tensor {k} of {s} elements: {(o != want).sum().item()} wrong"
        return None

    return run, check, sum(ss) * 4


CASES = [("allreduce_coalesced", case_allreduce, [16, 64, 256]),
         ("allgather_coalesced", case_allgather, [16, 64]),
         ("reducescatter_coalesced", case_reducescatter, [16, 64]),
         ("batch_isend_irecv", case_p2p, [8, 32, 64])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON file rank 0 writes: {case: {us, bytes, error}}")
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    res, failed = {}, False
    for name, make, ns in CASES:
        for n in ns:
            run, check, nbytes = make(n, rank, world, dev)
            err = check()
            # Every rank learns whether any rank saw a wrong element.
            bad = torch.tensor([1 if err else 0], device=dev)
            dist.all_reduce(bad)
            us = None if bad.item() else timed(run, args.iters)
            if err:
                print(f"rank {rank}: {name}-{n}: {err}", flush=True)
            failed |= bool(bad.item())
            res[f"{name}-{n}"] = {"us": us, "bytes": nbytes, "error": err}
            if rank == 0:
                print(f"{name}-{n}: {'FAILED' if bad.item() else f'{us:.1f} us'}", flush=True)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"preload": os.environ.get("LD_PRELOAD", ""), "nccl_version": ".".join(map(str, torch.cuda.nccl.version())), "world": world, "cases": res}, f, indent=1)
    dist.destroy_process_group()
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
