"""qvg.DeviceCodec from PyTorch against the host-form path, at the LongCat and Self-Forcing shapes.

bf16 CUDA input (random normal), encode and decode on PyTorch's current stream. Times:
  - resident: DeviceCodec.encode and DeviceCodec.decode(out=) into a preallocated bf16
    tensor, timed with CUDA events on the stream around one call (the GPU waits for the
    Python call too) and around 10 calls queued back to back (b2b, divided by 10),
    and the host wall time of the same calls without synchronization (what the Python
    thread spends queueing them);
  - host form: Codec(spec, device="cuda").encode and .decode(output="cuda", dtype="bfloat16"),
    wall time with torch.cuda.synchronize() (today's path: parts through host memory).
Medians of --reps runs after one warm-up. Compare with build-gpu/bench/bench_cuda's kernel times.
    PYTHONPATH=build-gpu/python python3 python/bench/bench_resident.py [--reps 20] [--json FILE]
"""
import argparse
import json
import statistics
import time

import torch

import qvg
from bench_dlpack import median_ms as wall_ms  # wall time with torch.cuda.synchronize()

SHAPES = (("self-forcing span", (12, 37440, 128)), ("longcat context", (32, 29640, 128)))
SPECS = ("rtn", "qvg:iters=2,init=random", "qvg-pro:iters=5,init=random", "qvg:iters=2")


def event_ms(fn, reps, batch=1):
    """GPU time (CUDA events) of `batch` calls queued back to back, divided by
    batch: with batch > 1, the rate of calls queued behind each other, as in a
    model's step; with 1, one call, the GPU also waiting for the Python call."""
    fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batch):
            fn()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) / batch)
    return statistics.median(t)


def queue_ms(fn, reps):
    """Host time of fn without waiting for the GPU (synchronized between runs)."""
    fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    print(f"{'shape':<18} {'spec':<28} {'res enc':>9} {'res dec':>9} {'b2b enc':>9} {'b2b dec':>9} {'queue enc':>9}"
          f" {'queue dec':>9} {'host enc':>9} {'host dec':>9}   (ms)")
    for name, shape in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(7)
        x = torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)
        out = torch.empty_like(x)
        for spec in SPECS:
            s = torch.cuda.current_stream().cuda_stream
            dc = qvg.DeviceCodec(spec)
            holder = {}

            def enc():
                holder["e"] = dc.encode(x, stream=s)

            enc_ms = event_ms(enc, args.reps)
            dec_ms = event_ms(lambda: dc.decode(holder["e"], out=out, stream=s), args.reps)
            benc_ms = event_ms(enc, max(3, args.reps // 4), batch=10)
            bdec_ms = event_ms(lambda: dc.decode(holder["e"], out=out, stream=s), args.reps, batch=10)
            qenc_ms = queue_ms(enc, args.reps)
            qdec_ms = queue_ms(lambda: dc.decode(holder["e"], out=out, stream=s), args.reps)
            hc = qvg.Codec(spec, device="cuda")
            he = hc.encode(x)
            henc_ms = wall_ms(lambda: hc.encode(x), max(3, args.reps // 4))
            hdec_ms = wall_ms(lambda: hc.decode(he, output="cuda", dtype="bfloat16"), max(3, args.reps // 4))
            print(f"{name:<18} {spec:<28} {enc_ms:9.3f} {dec_ms:9.3f} {benc_ms:9.3f} {bdec_ms:9.3f} {qenc_ms:9.3f} {qdec_ms:9.3f}"
                  f" {henc_ms:9.3f} {hdec_ms:9.3f}", flush=True)
            rows.append(dict(shape=name, dims=list(shape), spec=spec, resident_encode_ms=enc_ms,
                             resident_decode_ms=dec_ms, b2b_encode_ms=benc_ms, b2b_decode_ms=bdec_ms, queue_encode_ms=qenc_ms, queue_decode_ms=qdec_ms,
                             host_form_encode_ms=henc_ms, host_form_decode_ms=hdec_ms))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
