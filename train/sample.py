#!/usr/bin/env python3
"""PyTorch reference sampler for the qvg reference model: evaluation and golden outputs.

Given the first 6 frames (2 chunks) of each held-out window as clean context, generates
the next 9 frames (3 chunks) chunk by chunk with a KV cache (model.generate_chunk),
all in fp32 (TF32 off on CUDA). Initial noise comes from a CPU torch.Generator seeded
with --seed, so CPU and GPU runs use identical noise.

Measures (PSNR on uint8 frames, 255 peak, MSE over all pixels of the 9 frames of a
window, then averaged over windows):
  true context   - the window's own first 6 frames
  other context  - the first 6 frames of the same-index window of the next clip
                   (cockatoo->vtest->box->cup->cityCC0->cockatoo), same noise
  copy-last      - baseline: repeat the last true context frame
Also 8-step sampling with the true context.

Writes: OUT/eval_metrics.json, OUT/continuations.npz (uint8 frames), and with
--golden DIR the golden files for the C++ runtime (see docs/MODEL.md):
  DIR/golden.safetensors  (fp32 unless noted; ~3-5 MB)

Usage: python3 train/sample.py --model models/qvg_ref_video_dit.safetensors \
          --out /tmp/eval [--golden models/golden] [--device cpu|cuda]
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as qdata  # noqa: E402
import st_io  # noqa: E402
from model import (Config, VideoDiT, append_cache, encode_context, generate_chunk,  # noqa: E402
                   patchify, timesteps, unpatchify)

CTX_FRAMES = 6      # 2 chunks of context
GEN_CHUNKS = 3      # 9 generated frames


def load_model(path, device):
    sd, meta = st_io.load(path)
    cfg = Config(**json.loads(meta["config"]))
    model = VideoDiT(cfg)
    model.load_state_dict({k: v.float() for k, v in sd.items()})
    return model.to(device).eval(), meta


def to_u8(x):
    """model space [-1,1] -> uint8: clamp, (x + 1) * 127.5 in fp32, round half to even."""
    return torch.round((x.clamp(-1, 1) + 1) * 127.5).to(torch.uint8)


def psnr_u8(a, b):
    """a, b uint8 [..., T, H, W, C] -> PSNR per leading index over all trailing dims."""
    d = (a.double() - b.double()).pow(2).flatten(start_dim=a.dim() - 4).mean(-1)
    return 10 * torch.log10(255.0 ** 2 / d.clamp_min(1e-10))


def make_noise(num, cfg, seed):
    """Initial noise [num, GEN_CHUNKS, Lc, patch_dim] from a CPU generator."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(num, GEN_CHUNKS, cfg.tokens_per_chunk, cfg.patch_dim, generator=g)


@torch.no_grad()
def continue_video(model, context, noise, ts):
    """context [B, 6, 64, 64, 3] in [-1,1]; noise [B, GEN_CHUNKS, Lc, 48]
    -> generated frames [B, GEN_CHUNKS*3, 64, 64, 3] in [-1,1]."""
    cfg = model.cfg
    cache = encode_context(model, context)
    out = []
    for j in range(noise.shape[1]):
        x, cache = generate_chunk(model, noise[:, j], CTX_FRAMES + j * cfg.chunk_frames, cache, ts)
        out.append(unpatchify(x, cfg))
    return torch.cat(out, dim=1)


def batched(fn, n, bs):
    return torch.cat([fn(slice(a, min(n, a + bs))) for a in range(0, n, bs)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--frames", default=".cache/qvg_frames")
    ap.add_argument("--out", required=True)
    ap.add_argument("--golden", default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--shift", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--golden-only", action="store_true",
                    help="only write the golden files (skip the PSNR evaluation)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        torch.set_num_threads(os.cpu_count())
    t0 = time.time()
    model, meta = load_model(args.model, device)
    cfg = model.cfg
    clips = qdata.load_clips(args.frames)
    held = qdata.heldout_windows(clips)
    if args.golden_only:
        write_golden(model, meta, args, held, timesteps(args.steps, args.shift), device)
        return
    names = [n for n, _, _ in held]
    real = torch.stack([torch.from_numpy(w) for _, _, w in held])          # uint8 [W,15,64,64,3]
    W = real.shape[0]
    # other-clip context: same window index k of the next clip in CLIPS order
    by_clip = {c: [i for i, (n, _, _) in enumerate(held) if n == c] for c in qdata.CLIPS}
    other = []
    for i, (n, _, _) in enumerate(held):
        k = by_clip[n].index(i)
        nxt = by_clip[qdata.CLIPS[(qdata.CLIPS.index(n) + 1) % len(qdata.CLIPS)]]
        other.append(nxt[k % len(nxt)])
    ctx_true = qdata.to_model(real[:, :CTX_FRAMES].float())
    ctx_other = ctx_true[other]
    future = real[:, CTX_FRAMES:]
    noise = make_noise(W, cfg, args.seed)
    ts = timesteps(args.steps, args.shift)
    ts8 = timesteps(8, args.shift)

    def run(ctx, tsched):
        return batched(lambda s: continue_video(model, ctx[s].to(device), noise[s].to(device),
                                                tsched).cpu(), W, args.batch)

    gen_true = to_u8(run(ctx_true, ts))
    gen_other = to_u8(run(ctx_other, ts))
    gen_true8 = to_u8(run(ctx_true, ts8))
    copy_last = real[:, CTX_FRAMES - 1:CTX_FRAMES].expand_as(future)
    res = {k: psnr_u8(v, future) for k, v in
           [("true_context", gen_true), ("other_context", gen_other),
            ("true_context_8steps", gen_true8), ("copy_last_frame", copy_last)]}
    per_frame = {k: (10 * torch.log10(255.0 ** 2 / (v.double() - future.double()).pow(2)
                                      .mean(dim=(2, 3, 4)))).mean(0).tolist()
                 for k, v in [("true_context", gen_true), ("other_context", gen_other),
                              ("copy_last_frame", copy_last)]}
    metrics = {
        "model": os.path.basename(args.model),
        "model_sha256": hashlib.sha256(open(args.model, "rb").read()).hexdigest(),
        "device": str(device), "torch": torch.__version__, "steps": args.steps,
        "shift": args.shift, "timesteps": ts, "seed": args.seed,
        "windows": [{"clip": n, "start": a, "other_clip": held[other[i]][0],
                     **{k: float(v[i]) for k, v in res.items()}}
                    for i, (n, a, _) in enumerate(held)],
        "mean_psnr_db": {k: float(v.mean()) for k, v in res.items()},
        "per_clip_psnr_db": {c: {k: float(v[[i for i in range(W) if names[i] == c]].mean())
                                 for k, v in res.items()} for c in qdata.CLIPS},
        "per_frame_psnr_db": per_frame,
        "true_beats_other_windows": int((res["true_context"] > res["other_context"]).sum()),
        "num_windows": W,
    }
    np.savez_compressed(os.path.join(args.out, "continuations.npz"), real=real.numpy(),
                        gen_true=gen_true.numpy(), gen_other=gen_other.numpy(),
                        other_index=np.array(other), clips=np.array(names))
    print(json.dumps(metrics["mean_psnr_db"], indent=1))
    print("per clip", json.dumps(metrics["per_clip_psnr_db"], indent=1))

    if args.golden:
        metrics["golden"] = write_golden(model, meta, args, held, ts, device)
    metrics["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "eval_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)


@torch.no_grad()
def write_golden(model, meta, args, held, ts, device):
    """Golden case: held-out window GOLDEN_WINDOW; 2 context chunks, 2 generated chunks,
    `ts` Euler steps, noise from CPU generator seeded with args.seed + 7."""
    cfg = model.cfg
    wi = 3  # vtest, first held-out window (frames 192..206)
    name, start, w = held[wi]
    u8 = torch.from_numpy(w[:CTX_FRAMES])
    ctx = qdata.to_model(u8.float())[None].to(device)
    g = torch.Generator(device="cpu").manual_seed(args.seed + 7)
    noise = torch.randn(1, 2, cfg.tokens_per_chunk, cfg.patch_dim, generator=g)
    # context: chunk 0 then chunk 1, recording chunk 1's per-layer tensors
    Lg = 128  # tokens [0, 128) of context chunk 1: frame 3, patch rows 0..7
    cache = encode_context(model, ctx[:, :cfg.chunk_frames])
    tok1 = patchify(ctx[:, cfg.chunk_frames:2 * cfg.chunk_frames], cfg)
    _, kv, rec = model.forward_chunk(tok1, 0.0, cfg.chunk_frames, cache, record=True)
    cache = append_cache(cache, kv)
    out = {"context_u8": u8.contiguous(), "context": ctx[0].cpu().float().contiguous(),
           "noise": noise[0].contiguous(), "timesteps": torch.tensor(ts, dtype=torch.float32)}
    for li, r in enumerate(rec):
        for key in ("q", "k_pre", "k", "v"):
            out[f"layer{li}.ctx1.{key}"] = r[key][0, :Lg].cpu().float().contiguous()
    trace = []
    frames = []
    for j in range(2):
        x, cache = generate_chunk(model, noise[:, j].to(device), CTX_FRAMES + j * cfg.chunk_frames,
                                  cache, ts, trace=trace if j == 0 else None)
        frames.append(unpatchify(x, cfg))
    out["chunk0_steps"] = torch.cat(trace).cpu().float().contiguous()   # [steps, Lc, 48]
    out["generated"] = torch.cat(frames, 1)[0].cpu().float().contiguous()  # [6, 64, 64, 3]
    out["generated_u8"] = to_u8(out["generated"]).contiguous()
    os.makedirs(args.golden, exist_ok=True)
    gmeta = {"clip": name, "window_start_frame": str(start), "context_frames": str(CTX_FRAMES),
             "generated_chunks": "2", "steps": str(len(ts) - 1), "shift": str(args.shift),
             "noise_seed": str(args.seed + 7), "recorded_tokens": f"context chunk 1, tokens [0,{Lg})",
             "model_sha256": hashlib.sha256(open(args.model, "rb").read()).hexdigest(),
             "device": str(device), "torch": torch.__version__, "config": meta["config"]}
    path = os.path.join(args.golden, "golden.safetensors")
    st_io.save(out, path, gmeta)
    print(f"golden: {path} {os.path.getsize(path)/1e6:.2f} MB")
    return gmeta


if __name__ == "__main__":
    main()
