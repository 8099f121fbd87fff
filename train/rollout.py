#!/usr/bin/env python3
"""Longer rollouts than the 15-frame training window (CPU is fine, a few minutes).

From the first 6 frames of a held-out segment, generates CHUNKS chunks (3 frames each)
with (a) the full cache (every chunk attends to all earlier chunks; RoPE time distances
beyond the trained 14 frames) and (b) a local window that keeps only the last W clean
chunks in the cache (distances stay inside the trained range). Reports PSNR of each
generated frame against the real frame (as far as the held-out segment reaches) and
writes a strip image (every 3rd frame; rows: real, full cache, window W).

Usage: python3 train/rollout.py --model models/qvg_ref_video_dit.safetensors \
          --clip vtest --chunks 10 --window 4 --out docs/figures/rollout_vtest.png
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as qdata  # noqa: E402
from model import encode_context, generate_chunk, timesteps, unpatchify  # noqa: E402
from sample import load_model, psnr_u8, to_u8  # noqa: E402


@torch.no_grad()
def rollout(model, ctx, noise, ts, window):
    cfg = model.cfg
    Lc = cfg.tokens_per_chunk
    cache = encode_context(model, ctx)
    out = []
    for j in range(noise.shape[0]):
        if window and cache[0][0].shape[2] > window * Lc:
            cache = [(k[:, :, -window * Lc:], v[:, :, -window * Lc:]) for k, v in cache]
        x, cache = generate_chunk(model, noise[j][None], ctx.shape[1] + j * cfg.chunk_frames, cache, ts)
        out.append(unpatchify(x, cfg))
    return torch.cat(out, 1)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--frames", default=".cache/qvg_frames")
    ap.add_argument("--clip", default="vtest")
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    model, _ = load_model(args.model, "cpu")
    cfg = model.cfg
    v = qdata.load_clips(args.frames)[args.clip]
    s = qdata.split_point(v.shape[0])
    y, x = qdata.CENTER_Y, qdata.CENTER_X
    seg = torch.from_numpy(np.ascontiguousarray(v[s:, y:y + 64, x:x + 64]))
    ctx = qdata.to_model(seg[:6].float())[None]
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    noise = torch.randn(args.chunks, cfg.tokens_per_chunk, cfg.patch_dim, generator=g)
    ts = timesteps(4)
    res = {"clip": args.clip, "start": s, "chunks": args.chunks, "window": args.window}
    rows = [seg[6:6 + 3 * args.chunks]]
    for name, w in (("full", 0), (f"window{args.window}", args.window)):
        gen = to_u8(rollout(model, ctx, noise, ts, w))
        n = min(gen.shape[0], seg.shape[0] - 6)
        p = [float(psnr_u8(gen[i:i + 1], seg[6 + i:7 + i])) for i in range(n)]
        res[name] = {"psnr_per_frame": p, "pixel_std_per_frame":
                     gen.float().std(dim=(1, 2, 3)).tolist()}
        print(name, "PSNR per frame", np.round(p, 1).tolist(), flush=True)
        rows.append(gen)
    T = rows[1].shape[0]
    pad = np.full((64, 2, 3), 255, np.uint8)
    img = []
    for r in rows:
        fr = [np.concatenate([r[t].numpy() if t < r.shape[0] else np.full((64, 64, 3), 255, np.uint8),
                              pad], 1) for t in range(0, T, 3)]
        img.append(np.concatenate(fr, 1))
        img.append(np.full((2, img[-1].shape[1], 3), 255, np.uint8))
    from PIL import Image
    Image.fromarray(np.concatenate(img[:-1], 0)).quantize(colors=256, method=Image.MEDIANCUT,
                                                          dither=Image.NONE).save(args.out, optimize=True)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
