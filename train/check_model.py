#!/usr/bin/env python3
"""Self-checks of the reference model code (CPU, a few seconds):
1. patchify / unpatchify are inverse; token order is (frame, row, col), value (py, px, c).
2. The packed teacher-forcing forward (training) equals the chunk-by-chunk KV-cache
   forward (inference) on every noisy chunk, with random weights.
3. RoPE preserves norms and q.k depends only on position differences.
4. st_io round trip (bf16, f32).
Usage: python3 train/check_model.py
"""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
from model import (Config, VideoDiT, apply_rope, attention_math, encode_context,  # noqa: E402
                   patchify, rope_angles, unpatchify)
from train import chunk_mask, packed_layout  # noqa: E402


def main():
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    cfg = Config(layers=2)
    # 1. patchify
    x = torch.randn(2, 3, 64, 64, 3)
    tok = patchify(x, cfg)
    assert torch.equal(unpatchify(tok, cfg), x)
    assert tok[1, 256 * 2 + 16 * 5 + 7, (2 * 4 + 3) * 3 + 1] == x[1, 2, 5 * 4 + 2, 7 * 4 + 3, 1]
    print("patchify ok")

    # 2. packed training forward == KV-cache forward
    model = VideoDiT(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    n, Lc = 3, cfg.tokens_per_chunk
    frames = torch.rand(1, n * cfg.chunk_frames, 64, 64, 3, dtype=torch.float64) * 2 - 1
    noisy = torch.randn(1, n * Lc, cfg.patch_dim, dtype=torch.float64)
    t = torch.tensor([[0.9, 0.5, 0.2]], dtype=torch.float64)
    layout = packed_layout(cfg, n)
    cmask = chunk_mask(layout)
    chunk_of = torch.arange(len(layout) * Lc) // Lc
    tok_mask = cmask[chunk_of][:, chunk_of]
    cs = [rope_angles(cfg, i * cfg.chunk_frames, cfg.chunk_frames) for _, i in layout]
    cos = torch.cat([c for c, _ in cs])
    sin = torch.cat([s for _, s in cs])
    clean = patchify(frames, cfg)
    inp = torch.cat([clean[:, :(n - 1) * Lc], noisy], 1)
    tc = torch.cat([torch.zeros(1, n - 1, dtype=torch.float64), t], 1)
    with torch.no_grad():
        packed = model.forward_train(inp, tc, cos, sin, lambda q, k, v: attention_math(q, k, v, tok_mask))
    packed = packed[:, (n - 1) * Lc:]
    worst = 0.0
    for i in range(n):
        cache = encode_context(model, frames[:, :i * cfg.chunk_frames]) if i > 0 else []
        with torch.no_grad():
            v, _, _ = model.forward_chunk(noisy[:, i * Lc:(i + 1) * Lc], t[:, i], i * cfg.chunk_frames, cache)
        err = (v - packed[:, i * Lc:(i + 1) * Lc]).abs().max().item()
        worst = max(worst, err)
        print(f"chunk {i}: max |packed - cached| = {err:.2e} (|v| max {v.abs().max().item():.2f})")
    assert worst < 1e-5, worst  # fp32 inside norms, softmax and RoPE tables

    # 3. RoPE
    c, s = rope_angles(cfg, 0, 8)
    q = torch.randn(1, c.shape[0], 1, cfg.head_dim, dtype=torch.float64)
    qr = apply_rope(q, c.double(), s.double())
    assert torch.allclose(qr.norm(dim=-1), q.norm(dim=-1))
    g = cfg.tokens_per_frame
    k = torch.randn(1, c.shape[0], 1, cfg.head_dim, dtype=torch.float64)
    kr = apply_rope(k, c.double(), s.double())
    qs = q.clone()
    qs[0, g * 3 + 17] = q[0, 17]
    ks = k.clone()
    ks[0, g * 5 + 20] = k[0, 20]
    qsr = apply_rope(qs, c.double(), s.double())
    ksr = apply_rope(ks, c.double(), s.double())
    d1 = (qr[0, 17] * kr[0, 20]).sum()
    d2 = (qsr[0, g * 3 + 17] * ksr[0, g * 5 + 20]).sum()
    # same (row, col), frames (0,0) vs (3,5): differs; frames shifted equally: same
    qs2 = q.clone()
    qs2[0, g * 2 + 17] = q[0, 17]
    ks2 = k.clone()
    ks2[0, g * 2 + 20] = k[0, 20]
    d3 = (apply_rope(qs2, c.double(), s.double())[0, g * 2 + 17] *
          apply_rope(ks2, c.double(), s.double())[0, g * 2 + 20]).sum()
    assert abs(d1 - d3) < 1e-5 and abs(d1 - d2) > 1e-3  # cos/sin tables are fp32
    print("rope ok")

    # 4. st_io
    with tempfile.TemporaryDirectory() as d:
        ts = {"a": torch.randn(3, 5).bfloat16(), "b": torch.randn(7), "c": torch.arange(6).to(torch.uint8)}
        st_io.save(ts, os.path.join(d, "x.safetensors"), {"k": "v"})
        back, meta = st_io.load(os.path.join(d, "x.safetensors"))
        assert meta == {"k": "v"} and all(torch.equal(ts[k], back[k]) for k in ts)
    print("st_io ok")
    print("all checks passed")


if __name__ == "__main__":
    main()
