"""Ring attention over compressed history (qvg.distributed) against the same ring passing BF16 K/V.

One process per GPU under torchrun (NCCL), or one process without it (world size 1):

    torchrun --nproc-per-node 2 python/bench/bench_ring.py            # 2 GPUs of one host
    python3 python/bench/bench_ring.py --spans-per-rank 2             # one GPU: the history of 2 ranks

Each rank owns --spans-per-rank spans of --span-tokens tokens of one layer's history (random bf16 K/V,
LongCat-shaped by default: 32 heads x 128), compressed with --spec (and, for the comparison, kept in
BF16); --query-tokens queries per rank attend the whole history around the ring. Prints per rank:
the bytes it sends per step (its shard as it travels), the time of one ring_attention call (CUDA
events, median of --reps after --warmup), and peak GPU memory. Keep NVLink multicast off
(NCCL_NVLS_ENABLE=0; set below unless given).
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist

import qvg.distributed as qd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--span-tokens", type=int, default=29640)
    ap.add_argument("--spans-per-rank", type=int, default=1)
    ap.add_argument("--query-tokens", type=int, default=4680)
    ap.add_argument("--spec", default="qvg:iters=2,init=random")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dev = torch.device("cuda", torch.cuda.current_device())
    if world > 1:
        dist.init_process_group("nccl")
    g = torch.Generator(device=dev).manual_seed(100 + rank)
    shape = (1, a.heads, a.span_tokens, a.dim)
    results = {}
    for name, spec in (("bf16", None), ("compressed", a.spec)):
        torch.cuda.reset_peak_memory_stats()
        shard = qd.HistoryShard(a.heads, a.dim, key=spec, value=spec, device=dev)
        for _ in range(a.spans_per_rank):
            k = torch.randn(shape, generator=g, device=dev, dtype=torch.bfloat16)
            v = torch.randn(shape, generator=g, device=dev, dtype=torch.bfloat16)
            shard.add(k, v)
            del k, v
        shard.sync()
        q = torch.randn(1, a.heads, a.query_tokens, a.dim, generator=g, device=dev, dtype=torch.bfloat16)
        times = []
        for i in range(a.warmup + a.reps):
            if world > 1:
                dist.barrier()
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            qd.ring_attention(q, shard)
            t1.record()
            t1.synchronize()
            if i >= a.warmup:
                times.append(t0.elapsed_time(t1))
        results[name] = {"shard_bytes": shard.nbytes, "ms": statistics.median(times), "ms_all": times,
                         "peak_gb": torch.cuda.max_memory_allocated() / 1e9,
                         "bits_per_value": 8.0 * shard.nbytes / (2 * a.heads * a.dim * shard.tokens)}
        del shard, q
    b, c = results["bf16"], results["compressed"]
    print(f"rank {rank}/{world}: {a.spans_per_rank} span(s) x {a.span_tokens} tokens, {a.heads} heads x {a.dim}, "
          f"{a.query_tokens} queries; sends per step: bf16 {b['shard_bytes'] / 1e6:.1f} MB, {a.spec} "
          f"{c['shard_bytes'] / 1e6:.1f} MB ({b['shard_bytes'] / c['shard_bytes']:.2f}x less, "
          f"{c['bits_per_value']:.3f} bits/value); ring_attention bf16 {b['ms']:.3f} ms, compressed {c['ms']:.3f} ms; "
          f"peak GPU memory {b['peak_gb']:.2f} / {c['peak_gb']:.2f} GB", flush=True)
    if a.json and rank == 0:
        with open(a.json, "w") as fh:
            json.dump({"world_size": world, "args": vars(a), "rank0": results,
                       "device": torch.cuda.get_device_name(), "torch": torch.__version__}, fh, indent=1)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
