"""PyTorch's point-to-point patterns through torch.distributed's NCCL backend.

all_to_all_single with uneven splits (some 0) is what PyTorch turns into one group of
ncclSend/ncclRecv to every peer with 0-byte counts; batch_isend_irecv is the ring-shift and
all-pairs pattern of pipeline parallelism. Every result is compared with values each rank can
compute on its own, so a wrong byte fails the run.

  torchrun --nproc-per-node N torch-tests/p2p_pattern.py     (LD_PRELOAD=liboxccl.so to test oxccl)
"""
import os, sys
import torch
import torch.distributed as dist

def value(src, dst, i, dtype):
    # Distinct per (source, destination, index), exact in every dtype used below.
    v = (src * 7 + dst * 3 + i) % 61
    return torch.tensor(v, dtype=torch.float64).to(dtype)

def split(src, dst, n):
    # Uneven, with zeros: rank pairs whose sum is divisible by 3 exchange nothing.
    return 0 if (src + dst) % 3 == 0 else (src * n + dst) % 5 + 1 + 1000 * (dst % 2)

def main():
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    failures = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.uint8, torch.int32, torch.int64, torch.float64):
        for rep in range(3):
            send_splits = [split(rank, d, n) for d in range(n)]
            recv_splits = [split(s, rank, n) for s in range(n)]
            send = torch.cat([torch.stack([value(rank, d, i + rep, dtype) for i in range(c)]) if c else torch.empty(0, dtype=dtype) for d, c in enumerate(send_splits)]).to(dev)
            want = torch.cat([torch.stack([value(s, rank, i + rep, dtype) for i in range(c)]) if c else torch.empty(0, dtype=dtype) for s, c in enumerate(recv_splits)]).to(dev)
            recv = torch.full((sum(recv_splits),), 99, dtype=dtype, device=dev)
            dist.all_to_all_single(recv, send, recv_splits, send_splits)
            if not torch.equal(recv, want):
                failures += 1
                print(f"rank {rank}: all_to_all_single {dtype} rep {rep} wrong", flush=True)
        # Ring shift and all pairs with batch_isend_irecv, including a 0-element tensor per peer.
        ops, bufs = [], []
        for p in range(n):
            s = torch.stack([value(rank, p, i, dtype) for i in range(257)]).to(dev)
            r = torch.zeros(257, dtype=dtype, device=dev)
            bufs.append((p, r))
            ops += [dist.P2POp(dist.isend, s, p), dist.P2POp(dist.irecv, r, p),
                    dist.P2POp(dist.isend, torch.empty(0, dtype=dtype, device=dev), p),
                    dist.P2POp(dist.irecv, torch.empty(0, dtype=dtype, device=dev), p)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        for p, r in bufs:
            want = torch.stack([value(p, rank, i, dtype) for i in range(257)]).to(dev)
            if not torch.equal(r, want):
                failures += 1
                print(f"rank {rank}: batch_isend_irecv {dtype} from {p} wrong", flush=True)
        # Plain blocking send/recv outside a group: ring shift.
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        s = torch.stack([value(rank, nxt, i, dtype) for i in range(1 << 12)]).to(dev)
        r = torch.zeros(1 << 12, dtype=dtype, device=dev)
        if rank % 2 == 0:
            dist.send(s, nxt); dist.recv(r, prv)
        else:
            dist.recv(r, prv); dist.send(s, nxt)
        if not torch.equal(r, torch.stack([value(prv, rank, i, dtype) for i in range(1 << 12)]).to(dev)):
            failures += 1
            print(f"rank {rank}: send/recv ring {dtype} wrong", flush=True)
    torch.cuda.synchronize()
    total = torch.tensor([failures], device=dev)
    dist.all_reduce(total)
    if rank == 0:
        print(f"p2p_pattern: {n} ranks, {'PASS' if total.item() == 0 else 'FAIL'} ({total.item()} failures)", flush=True)
    dist.destroy_process_group()
    sys.exit(0 if total.item() == 0 else 1)

if __name__ == "__main__":
    main()
