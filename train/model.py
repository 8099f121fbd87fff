"""qvg reference model: a small autoregressive (block-causal) video diffusion transformer.

This file is the executable specification that docs/MODEL.md describes in words; the
C++ runtime (src/model/) reimplements exactly this forward pass in fp32. Keep it
explicit: no fused kernels whose math differs from `attention_math`.

Shapes (defaults): frames 64x64x3, patch 4 -> 16x16 = 256 tokens per frame, 3 frames per
chunk -> 768 tokens per chunk, width 256 = 2 heads x head_dim 128, 6 layers, MLP 1024.

Conventions
- Pixels x in [-1, 1]. Rectified flow: x_t = (1 - t) * x0 + t * eps, t in [0, 1]
  (t = 1 is pure noise); the network predicts the velocity v = eps - x0.
- Every chunk carries one timestep t; clean (context / cached) chunks use t = 0.
- Token order: frame-major, then patch row, then patch column; the 48 values of a
  token are (pixel row in patch, pixel column in patch, RGB channel), channel fastest.
- RoPE position of a token: (frame index counted from the first frame of the video,
  patch row, patch column).
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    frame: int = 64           # frame height = width, pixels
    patch: int = 4            # patch size, pixels
    channels: int = 3         # RGB
    dim: int = 256            # model width
    heads: int = 2
    head_dim: int = 128
    layers: int = 6
    mlp_dim: int = 1024
    chunk_frames: int = 3     # frames per autoregressive chunk
    freq_dim: int = 256       # sinusoidal timestep embedding size
    eps: float = 1e-6         # LayerNorm and RMSNorm epsilon
    rope_theta: float = 10000.0
    t_scale: float = 1000.0   # timestep t in [0,1] is multiplied by this before the sinusoid

    @property
    def grid(self):           # patches per side
        return self.frame // self.patch

    @property
    def tokens_per_frame(self):
        return self.grid * self.grid

    @property
    def tokens_per_chunk(self):
        return self.tokens_per_frame * self.chunk_frames

    @property
    def patch_dim(self):
        return self.patch * self.patch * self.channels

    @property
    def rope_split(self):
        """head_dim split into (time, height, width) parts, as in Wan 2.1:
        time gets d - 4*(d//6), height and width get 2*(d//6) each (128 -> 44, 42, 42)."""
        d = self.head_dim
        return (d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6))

    def to_dict(self):
        return asdict(self)


# ----------------------------------------------------------------------------- patchify

def patchify(x, cfg):
    """x: [B, T, H, W, C] -> tokens [B, T*g*g, p*p*C] (order t, row, col; value py, px, c)."""
    B, T, H, W, C = x.shape
    p, g = cfg.patch, cfg.grid
    x = x.reshape(B, T, g, p, g, p, C).permute(0, 1, 2, 4, 3, 5, 6)
    return x.reshape(B, T * g * g, p * p * C)


def unpatchify(tok, cfg):
    """tokens [B, T*g*g, p*p*C] -> [B, T, H, W, C] (inverse of patchify)."""
    B, L, _ = tok.shape
    p, g, C = cfg.patch, cfg.grid, cfg.channels
    T = L // (g * g)
    x = tok.reshape(B, T, g, g, p, p, C).permute(0, 1, 2, 4, 3, 5, 6)
    return x.reshape(B, T, g * p, g * p, C)


# ----------------------------------------------------------------------------- RoPE

def rope_freqs(cfg):
    """Per-pair angular frequencies, float64 [head_dim/2]: 22 time, 21 height, 21 width.
    Part of size n has frequencies theta^(-2i/n), i = 0 .. n/2-1."""
    parts = []
    for n in cfg.rope_split:
        i = torch.arange(0, n, 2, dtype=torch.float64)
        parts.append(cfg.rope_theta ** (-i / n))
    return parts


def rope_angles(cfg, frame_start, num_frames):
    """cos, sin float32 [num_frames*g*g, head_dim/2] for frames frame_start.. (absolute).

    Pair j of a token at (f, r, c) is rotated by angle pos * freq[j], with pos = f for
    the first 22 pairs, r for the next 21 and c for the last 21. Angles are computed
    in float64 and cos/sin rounded to float32."""
    ft, fh, fw = rope_freqs(cfg)
    g = cfg.grid
    f = torch.arange(frame_start, frame_start + num_frames, dtype=torch.float64)
    r = torch.arange(g, dtype=torch.float64)
    f, r, c = torch.meshgrid(f, r, r, indexing="ij")
    f, r, c = f.reshape(-1, 1), r.reshape(-1, 1), c.reshape(-1, 1)
    ang = torch.cat([f * ft, r * fh, c * fw], dim=1)
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x: [B, L, H, D]; cos/sin: [L, D/2]. Rotates adjacent pairs (x[2j], x[2j+1])."""
    xf = x.float()  # rotate in fp32 (also under bf16 autocast), return x's dtype
    x0 = xf[..., 0::2]
    x1 = xf[..., 1::2]
    cos = cos[None, :, None, :].float()
    sin = sin[None, :, None, :].float()
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.stack([y0, y1], dim=-1).flatten(-2).to(x.dtype)


# ----------------------------------------------------------------------------- pieces

def timestep_embedding(t, cfg):
    """t: float [N] in [0, 1] -> [N, freq_dim] = [cos(a), sin(a)], a = (t*1000) * w_i,
    w_i = exp(-ln(10000) * i / (freq_dim/2)), i = 0 .. freq_dim/2 - 1 (fp32)."""
    half = cfg.freq_dim // 2
    w = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half)
    a = (t.float() * cfg.t_scale)[:, None] * w.float().to(t.device)[None, :]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=1)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last dim (computed in fp32)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def layer_norm(x, eps):
    """LayerNorm without affine parameters (biased variance), computed in fp32."""
    return F.layer_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def attention_math(q, k, v, mask=None):
    """q: [B, H, Lq, D], k/v: [B, H, Lk, D]; mask: bool [Lq, Lk] (True = may attend).
    softmax(q k^T / sqrt(D)) v with the softmax in fp32. The reference definition."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v.float()).to(q.dtype)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.dim
        self.cfg = cfg
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.norm_q = RMSNorm(d, cfg.eps)   # over all heads together (as in Wan)
        self.norm_k = RMSNorm(d, cfg.eps)

    def qkv(self, x, cos, sin):
        """x: [B, L, dim] -> dict of q (post-RoPE), k_pre, k (post-RoPE), v, each [B, L, H, D]."""
        B, L, _ = x.shape
        H, D = self.cfg.heads, self.cfg.head_dim
        q = self.norm_q(self.q(x)).view(B, L, H, D)
        k_pre = self.norm_k(self.k(x)).view(B, L, H, D)
        v = self.v(x).view(B, L, H, D)
        return {"q": apply_rope(q, cos, sin), "k_pre": k_pre,
                "k": apply_rope(k_pre, cos, sin), "v": v}


class Block(nn.Module):
    """DiT block with adaLN-zero: 6 modulation vectors from the chunk's timestep."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.attn = Attention(cfg)
        self.fc1 = nn.Linear(cfg.dim, cfg.mlp_dim)
        self.fc2 = nn.Linear(cfg.mlp_dim, cfg.dim)
        self.ada = nn.Linear(cfg.dim, 6 * cfg.dim)  # input SiLU(c)

    def modulation(self, c):
        """c: [B, n, dim] (one per chunk) -> 6 tensors [B, n, 1, dim]:
        shift_attn, scale_attn, gate_attn, shift_mlp, scale_mlp, gate_mlp."""
        m = self.ada(F.silu(c)).unsqueeze(2)
        return m.chunk(6, dim=-1)

    def mlp(self, h):
        return self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class VideoDiT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.patch_embed = nn.Linear(cfg.patch_dim, d)
        self.t_fc1 = nn.Linear(cfg.freq_dim, d)
        self.t_fc2 = nn.Linear(d, d)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.final_ada = nn.Linear(d, 2 * d)       # shift, scale
        self.final = nn.Linear(d, cfg.patch_dim)
        self.reset_parameters()

    def reset_parameters(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.t_fc1.weight, std=0.02)
        nn.init.normal_(self.t_fc2.weight, std=0.02)
        for b in self.blocks:                       # adaLN-zero
            nn.init.zeros_(b.ada.weight)
            nn.init.zeros_(b.ada.bias)
        nn.init.zeros_(self.final_ada.weight)
        nn.init.zeros_(self.final_ada.bias)
        nn.init.zeros_(self.final.weight)
        nn.init.zeros_(self.final.bias)

    def time_cond(self, t):
        """t: [B, n] per-chunk timesteps -> c: [B, n, dim]."""
        B, n = t.shape
        e = timestep_embedding(t.reshape(-1), self.cfg).to(self.t_fc1.weight.dtype)
        c = self.t_fc2(F.silu(self.t_fc1(e)))
        return c.view(B, n, -1)

    # -------------------------------------------------------------- training forward
    def forward_train(self, x, t_chunks, cos, sin, attend):
        """Teacher-forcing forward over a packed sequence of chunks.

        x:        [B, n*Lc, patch_dim] tokens of n chunks (each Lc = tokens_per_chunk)
        t_chunks: [B, n] timestep per chunk
        cos, sin: [n*Lc, head_dim/2] RoPE tables for each token's (frame, row, col)
        attend:   callable(q, k, v) -> out on [B, H, L, D], implementing the mask
        Returns the velocity prediction [B, n*Lc, patch_dim].
        """
        cfg = self.cfg
        B, L, _ = x.shape
        n, Lc = t_chunks.shape[1], cfg.tokens_per_chunk
        c = self.time_cond(t_chunks)
        h = self.patch_embed(x)
        for blk in self.blocks:
            sa, ca, ga, sm, cm, gm = blk.modulation(c)
            y = layer_norm(h, cfg.eps).view(B, n, Lc, -1) * (1 + ca) + sa
            a = blk.attn.qkv(y.view(B, L, -1), cos, sin)
            o = attend(a["q"].transpose(1, 2), a["k"].transpose(1, 2), a["v"].transpose(1, 2))
            o = blk.attn.o(o.transpose(1, 2).reshape(B, L, -1))
            h = h + (o.view(B, n, Lc, -1) * ga).view(B, L, -1)
            y = layer_norm(h, cfg.eps).view(B, n, Lc, -1) * (1 + cm) + sm
            h = h + (blk.mlp(y.view(B, L, -1)).view(B, n, Lc, -1) * gm).view(B, L, -1)
        shift, scale = self.final_ada(F.silu(c)).unsqueeze(2).chunk(2, dim=-1)
        y = layer_norm(h, cfg.eps).view(B, n, Lc, -1) * (1 + scale) + shift
        return self.final(y.view(B, L, -1))

    # -------------------------------------------------------------- inference forward
    def forward_chunk(self, x, t, frame_start, cache=None, record=False):
        """One chunk against a KV cache (the reference for the C++ runtime).

        x:           [B, Lc, patch_dim] tokens of one chunk
        t:           python float or tensor [B], the chunk's timestep
        frame_start: absolute index of the chunk's first frame (RoPE time position)
        cache:       list (per layer) of (k, v), each [B, H, Lk, D] post-RoPE keys and
                     values of the clean earlier chunks, or None / empty for no context
        record:      if True also return per-layer dicts of q, k_pre, k, v [B, L, H, D]
        The chunk attends to all cached tokens and to all of its own tokens.
        Returns (velocity [B, Lc, patch_dim], per-layer (k, v) of this chunk, records).
        """
        cfg = self.cfg
        B, Lc, _ = x.shape
        if not torch.is_tensor(t):
            t = torch.full((B,), float(t), device=x.device)
        cos, sin = rope_angles(cfg, frame_start, cfg.chunk_frames)
        cos, sin = cos.to(x.device), sin.to(x.device)
        c = self.time_cond(t.view(B, 1))
        h = self.patch_embed(x)
        new_kv, records = [], []
        for i, blk in enumerate(self.blocks):
            sa, ca, ga, sm, cm, gm = [m[:, 0] for m in blk.modulation(c)]
            y = layer_norm(h, cfg.eps) * (1 + ca) + sa
            a = blk.attn.qkv(y, cos, sin)
            q, k, v = (a[n].transpose(1, 2) for n in ("q", "k", "v"))
            new_kv.append((k, v))
            if cache is not None and len(cache) > 0:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            o = attention_math(q, k, v)
            h = h + blk.attn.o(o.transpose(1, 2).reshape(B, Lc, -1)) * ga
            y = layer_norm(h, cfg.eps) * (1 + cm) + sm
            h = h + blk.mlp(y) * gm
            if record:
                records.append(a)
        shift, scale = self.final_ada(F.silu(c[:, 0])).unsqueeze(1).chunk(2, dim=-1)
        y = layer_norm(h, cfg.eps) * (1 + scale) + shift
        return self.final(y), new_kv, records


# ----------------------------------------------------------------------------- sampler

def timesteps(steps, shift=1.0):
    """Euler schedule t_0 = 1 > t_1 > ... > t_steps = 0: s_k = 1 - k/steps,
    t_k = shift*s_k / (1 + (shift-1)*s_k). Returned as a list of python floats."""
    out = []
    for k in range(steps + 1):
        s = 1.0 - k / steps
        out.append(shift * s / (1.0 + (shift - 1.0) * s))
    return out


@torch.no_grad()
def encode_context(model, frames, cache=None, frame_start=0):
    """Appends the clean chunks of `frames` [B, T, H, W, C] (T a multiple of chunk_frames,
    values in [-1,1]) to the cache, running each chunk at t = 0. Returns the cache."""
    cfg = model.cfg
    cache = [] if cache is None else cache
    T = frames.shape[1]
    for f0 in range(0, T, cfg.chunk_frames):
        tok = patchify(frames[:, f0:f0 + cfg.chunk_frames], cfg)
        _, kv, _ = model.forward_chunk(tok, 0.0, frame_start + f0, cache)
        cache = append_cache(cache, kv)
    return cache


def append_cache(cache, kv):
    if not cache:
        return [(k, v) for k, v in kv]
    return [(torch.cat([ck, k], 2), torch.cat([cv, v], 2)) for (ck, cv), (k, v) in zip(cache, kv)]


@torch.no_grad()
def generate_chunk(model, noise, frame_start, cache, ts, trace=None):
    """Euler-samples one chunk from `noise` [B, Lc, patch_dim] (t = ts[0] = 1) down to
    ts[-1] = 0 against the cache: x <- x + (t_{k+1} - t_k) * v(x, t_k). The result is
    clamped to [-1, 1], then run once more at t = 0 to produce the chunk's clean K/V,
    which is appended to the cache. Returns (clean tokens, new cache)."""
    x = noise
    for k in range(len(ts) - 1):
        v, _, _ = model.forward_chunk(x, ts[k], frame_start, cache)
        x = x + (ts[k + 1] - ts[k]) * v
        if trace is not None:
            trace.append(x.clone())
    x = x.clamp(-1.0, 1.0)
    _, kv, _ = model.forward_chunk(x, 0.0, frame_start, cache)
    return x, append_cache(cache, kv)
