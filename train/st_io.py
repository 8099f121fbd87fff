"""Minimal .safetensors reader/writer for torch tensors (no dependency on the
`safetensors` package, which Debian 12 lacks). Format: 8-byte little-endian header
length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, ...,
"__metadata__": {str: str}}, then the raw little-endian tensor bytes. Tensors are
written in sorted name order, 8-byte aligned header (padded with spaces)."""
import json
import struct

import torch

_DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
       torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8", torch.int16: "I16"}
_RDT = {v: k for k, v in _DT.items()}
_RAW = {torch.bfloat16: torch.int16, torch.float16: torch.int16}  # numpy has no bf16


def _to_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype in _RAW:
        t = t.view(_RAW[t.dtype])
    return t.numpy().tobytes()


def save(tensors, path, metadata=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = _to_bytes(t)
        header[name] = {"dtype": _DT[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    """Returns (dict name -> tensor, metadata dict)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        dt = _RDT[info["dtype"]]
        a, b = info["data_offsets"]
        raw = bytearray(data[a:b])
        store = _RAW.get(dt, dt)
        t = torch.frombuffer(raw, dtype=store) if b > a else torch.empty(0, dtype=store)
        if store is not dt:
            t = t.view(dt)
        out[name] = t.reshape(info["shape"])
    return out, meta
