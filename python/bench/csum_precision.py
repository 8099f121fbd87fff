"""What QVG-Pro's decode would lose if its centroid sums were BF16 pairs.

The format's decode (docs/FORMAT.md) adds each stage's BF16 centroid to the
dequantized residual in an FP32 running sum, last stage first, and the GPU
rounds the result to BF16 once. A faster decode (bench_decode_probe's
"BF16 centroid sums" row) would sum the stages' centroids as packed BF16
pairs, rounded to BF16 after each add (last stage first), widen that sum and
add it to the residual in FP32. This script emulates both from a tensor's
parts and reports the errors against the input, on the tensors given:

    build/qvg dump-kv --context data/clips/cockatoo.mp4 --start 192 --context-frames 24 -o /tmp/kv.safetensors
    PYTHONPATH=build/python /usr/bin/python3 python/bench/csum_precision.py [/tmp/kv.safetensors ...]

It takes every `layerN.k`, `.k_pre` and `.v` of the files (dump-kv's
[tokens, heads, dim] or [heads, tokens, dim]); without files, random-normal
data. The residual is recovered as the
CPU decode minus the FP32 centroid sum (exact to FP32 rounding, far below
BF16's), so both rows use the same codes and scales.
"""
import json
import struct
import sys

import numpy as np

import qvg


def bf16_round(x):
    """float32 -> float32 rounded to the nearest BF16, ties to even (finite x)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "F16": np.float16}.get(info["dtype"])
        if dt is None:
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(blob[a:b], dtype=dt).reshape(info["shape"]).astype(np.float32)
    return out


def errors(x, rec):
    d = (rec.astype(np.float64) - x.astype(np.float64)).ravel()
    return float(np.mean(d * d)), float(np.sqrt(np.sum(d * d) / np.sum(x.astype(np.float64) ** 2)))


def emulate(x, spec="qvg-pro", role="key"):
    codec = qvg.Codec(spec)
    enc = codec.encode(x, role=role)
    xh = codec.decode(enc)  # the CPU decode: FP32 running sum, not rounded
    h, n, d = x.shape
    parts = enc.parts
    ids = np.frombuffer(parts["ids"], np.uint8)
    stages = ids.size // (h * n)
    ids = ids.reshape(stages, h, n)
    cent = np.frombuffer(parts["centroids"], np.uint16).reshape(stages, h, -1, d)
    c = [(cent[s][np.arange(h)[:, None], ids[s]].astype(np.uint32) << 16).view(np.float32) for s in range(stages)]
    # The reference's sum is ((((r + c[S-1]) + ...) + c[0]); r back from it.
    r = xh.copy()
    for s in range(stages):
        r = (r - c[s]).astype(np.float32)
    cs = c[stages - 1]
    for s in range(stages - 2, -1, -1):
        cs = bf16_round(cs + c[s])
    now = bf16_round(xh)  # the GPU's BF16 output today
    new = bf16_round((r + cs).astype(np.float32))
    return errors(x, now), errors(x, new), errors(now, new)


def main(paths):
    tensors = {}
    for p in paths:
        for name, t in read_safetensors(p).items():
            if not name.endswith((".k", ".k_pre", ".v")):
                continue  # dump-kv's keys and values, not its queries
            if t.ndim == 4 and t.shape[0] == 1:
                t = t[0]
            if t.ndim == 3 and t.shape[0] > t.shape[1]:  # dump-kv's [tokens, heads, dim] ("thd")
                t = t.transpose(1, 0, 2)
            if t.ndim == 3 and t.shape[1] >= 256:
                tensors[f"{p}:{name}"] = t
    if not tensors:
        rng = np.random.default_rng(7)
        tensors["random-normal [4, 2048, 128]"] = rng.standard_normal((4, 2048, 128), dtype=np.float32)
    print(f"{'tensor':60s} {'rel_l2 now':>11s} {'rel_l2 bf16 sums':>17s} {'mse ratio':>10s} {'rel_l2 new vs now':>18s}")
    for name, t in tensors.items():
        role = "value" if name.endswith(".v") else "key"
        (m0, r0), (m1, r1), (_, rd) = emulate(np.ascontiguousarray(t, dtype=np.float32), role=role)
        print(f"{name[-60:]:60s} {r0:11.5f} {r1:17.5f} {m1 / m0:10.5f} {rd:18.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])
