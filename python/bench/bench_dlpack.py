"""What DLPack saves at the LongCat shape [32, 29640, 128] (needs a CUDA device and PyTorch).

Times, per codec, the module's encode of a bf16 CUDA tensor read in place against the
encode of the same values as a host float32 NumPy array, and the decode into device
memory (bf16 DeviceArray, taken by torch.from_dlpack) against the decode to a NumPy
float32 array. Medians of --reps runs after one warm-up; wall time around each call.
    PYTHONPATH=build/python python3 python/bench/bench_dlpack.py [--reps 5] [--json FILE]
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch

import qvg


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    ok, why = qvg.cuda_available()
    if not ok:
        raise SystemExit("bench_dlpack: " + why)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(32, 29640, 128, device="cuda", generator=gen).to(torch.bfloat16)
    host = x.float().cpu().numpy()
    rows = []
    print(f"{'codec':<28} {'enc cuda':>9} {'enc numpy':>10} {'dec cuda':>9} {'dec numpy':>10}  (ms)")
    for spec in ("rtn", "qvg:iters=2,init=random", "qvg-pro:iters=5,init=random"):
        codec = qvg.Codec(spec, device="cuda")
        e = codec.encode(x)
        assert e.parts == codec.encode(host).parts
        r = {
            "spec": spec,
            "encode_cuda_ms": median_ms(lambda: codec.encode(x), a.reps),
            "encode_numpy_ms": median_ms(lambda: codec.encode(host), a.reps),
            "decode_cuda_bf16_ms": median_ms(lambda: torch.from_dlpack(codec.decode(e, output="cuda", dtype="bfloat16")),
                                             a.reps),
            "decode_numpy_ms": median_ms(lambda: codec.decode(e), a.reps),
        }
        rows.append(r)
        print(f"{spec:<28} {r['encode_cuda_ms']:9.2f} {r['encode_numpy_ms']:10.2f} {r['decode_cuda_bf16_ms']:9.2f} "
              f"{r['decode_numpy_ms']:10.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
