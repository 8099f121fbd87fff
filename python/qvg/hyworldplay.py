"""qvg.hyworldplay: a compressed frame cache for HY-WorldPlay's memory attention (docs/INTEGRATIONS.md,
"HY-WorldPlay").

HY-WorldPlay attends each chunk to a set of past latent frames chosen by camera-pose alignment
(select_aligned_memory_frames: the first chunk, the best-overlapping 4-frame clips and the recent
frames), not to a contiguous window. This cache holds every past frame's K and V of every block, frames
grouped into encoded spans, and reads any selection of frames, in the order given, out of the spans:

    import qvg.hyworldplay
    cache = qvg.hyworldplay.FrameKVCache(num_blocks=30, heads=24, dim=256, frame_tokens=880,
                                         batch=1, key="qvg", value="qvg", frames_per_span=8)
    cache.append(block, k, v)                              # [batch, heads, T, dim], T whole frames
    k_all, v_all = cache.kv(block, frames=selected, extra=(k_cur, v_cur))   # [batch, heads, n, dim]

Each sample of the batch has its own spans (per-sample caches; the K and V a sample's frames get do not
depend on the other samples). HY-WorldPlay's WAN pipeline stacks its two key kinds per frame along D
(RoPE keys and ProPE keys: dim = 2 x 128); its HunyuanVideo pipeline stacks them along the batch
(batch=2); both are keys as the attention reads them (after RoPE / ProPE). Classifier-free guidance runs
its two branches with two caches (one FrameKVCache each).

Spans: appended frames stay in BF16 until frames_per_span of them are held, then those are encoded as
one span (the k-means of a block's span starts from the centroids of its previous span, qvg method).
A read decodes each run of selected frames that are consecutive in one span with one ranged decode
(qvg, rtn; other methods decode the span whole into scratch) straight into the output buffer, which
the next kv() call reuses (.clone() what must outlive it).
"""
import torch

from ._device_spans import Buffers, Codecs, check_extra, check_kv, resolve_device, stream_of
from ._plan import check_chunk_tokens, check_frames, frame_runs

__all__ = ["FrameKVCache"]


class _Block:
    def __init__(self):
        self.spans = []  # [first frame, frame count, k enc, v enc]
        self.pending = []  # BF16 chunks [batch, heads, t, dim] not yet in a span, in frame order
        self.pending_frames = 0
        self.frames = 0  # frames held (spans + pending)


class FrameKVCache:
    """Per block, the K and V of every appended latent frame, readable by frame index.

    num_blocks, heads, dim: the attention's (dim: the width of a cached row, e.g. 256 where RoPE and
    ProPE keys are stacked along D). frame_tokens: tokens per latent frame (HY-WorldPlay WAN at
    352 x 640: 880). batch: samples appended together, each with its own spans. key / value: codec
    specs ("bf16": BF16 spans, for comparisons). frames_per_span: frames encoded together (>= 1).
    device: the CUDA device (default: the current one).
    """

    def __init__(self, num_blocks, heads, dim, *, frame_tokens, batch=1, key="qvg", value="qvg",
                 frames_per_span=8, device=None):
        for name, x in (("num_blocks", num_blocks), ("heads", heads), ("dim", dim), ("frame_tokens", frame_tokens),
                        ("batch", batch), ("frames_per_span", frames_per_span)):
            if not isinstance(x, int) or isinstance(x, bool) or x < 1:
                raise ValueError(f"{name} must be a positive int, got {x!r}")
        self.device = resolve_device(device)
        self.num_blocks, self.heads, self.dim = num_blocks, heads, dim
        self.frame_tokens, self.batch, self.frames_per_span = frame_tokens, batch, frames_per_span
        self._codecs = Codecs(key, value, self.device)
        self._buffers = Buffers(self.device)
        self.reset()

    def reset(self):
        """Empties every block (a new video); the read buffers are kept."""
        self._blocks = [_Block() for _ in range(self.num_blocks)]

    def _block(self, block):
        if not isinstance(block, int) or isinstance(block, bool) or not 0 <= block < self.num_blocks:
            raise ValueError(f"block must be an int in 0 .. {self.num_blocks - 1}, got {block!r}")
        return self._blocks[block]

    def frames(self, block):
        """Frames held by a block."""
        return self._block(block).frames

    def append(self, block, k, v):
        """Adds frames to a block: k and v [batch, heads, T, dim] (CUDA, float32 / bfloat16 / float16; held
        in BF16, then encoded), T a whole number of frames. They get the next frame indices. Spans of
        frames_per_span frames are encoded on the current stream. Returns the block's frame count."""
        b = self._block(block)
        kb, kt = check_kv(k, v, "", self.heads, self.dim, self.device)
        if kb != self.batch:
            raise ValueError(f"k has batch {kb}, the cache holds {self.batch} samples")
        f = check_chunk_tokens(kt, self.frame_tokens)
        b.pending.append((k.to(torch.bfloat16, copy=True).contiguous(), v.to(torch.bfloat16, copy=True).contiguous()))
        b.pending_frames += f
        b.frames += f
        if b.pending_frames >= self.frames_per_span:
            self._encode_pending(b)
        return b.frames

    def _encode_pending(self, b):
        s = stream_of(self.device)
        ft, rows = self.frame_tokens, self.batch * self.heads
        with torch.cuda.device(self.device):
            k = torch.cat([p[0] for p in b.pending], dim=2)
            v = torch.cat([p[1] for p in b.pending], dim=2)
            first = b.frames - b.pending_frames
            done = 0
            while b.pending_frames - done >= self.frames_per_span:
                n = self.frames_per_span
                sl = slice(done * ft, (done + n) * ft)
                prev = b.spans[-1] if b.spans else None
                ke = self._codecs.encode(self._codecs.k, k[:, :, sl].reshape(rows, n * ft, self.dim), "key", s,
                                         prev[2] if prev else None)
                ve = self._codecs.encode(self._codecs.v, v[:, :, sl].reshape(rows, n * ft, self.dim), "value", s,
                                         prev[3] if prev else None)
                b.spans.append([first + done, n, ke, ve])
                done += n
            rest = b.pending_frames - done
            b.pending = [(k[:, :, done * ft:].clone(), v[:, :, done * ft:].clone())] if rest else []
            b.pending_frames = rest

    def kv(self, block, frames=None, *, extra=None, dtype=torch.bfloat16):
        """The K and V of `frames` (frame indices of this block, any order, no repeats; None: all, in order)
        followed by extra=(k, v) ([batch, heads, T, dim], e.g. the chunk being denoised): views
        [batch, heads, len(frames) * frame_tokens + T, dim] of a buffer reused by the next call."""
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float32, got {dtype}")
        b = self._block(block)
        sel = list(range(b.frames)) if frames is None else check_frames(frames, b.frames)
        t = 0
        if extra is not None:
            ek, ev, eb, t = check_extra(extra, self.heads, self.dim, self.device)
            if eb != self.batch:
                raise ValueError(f"extra has batch {eb}, the cache holds {self.batch} samples")
        if not sel and extra is None:
            raise ValueError("nothing to read: no frames selected and no extra rows")
        ft, rows = self.frame_tokens, self.batch * self.heads
        n = len(sel) * ft
        lead = (self.batch, self.heads)
        kb = self._buffers.get("k", lead, n + t, (self.dim,), dtype)
        vb = self._buffers.get("v", lead, n + t, (self.dim,), dtype)
        cap = kb.shape[2]
        # spans, then the BF16 frames as one more "span" (index len(b.spans))
        spans = [(s[0], s[1]) for s in b.spans]
        if b.pending_frames:
            spans.append((b.frames - b.pending_frames, b.pending_frames))
        s = stream_of(self.device)
        with torch.cuda.device(self.device):
            pk = pv = None
            for si, begin, count, out in frame_runs(sel, spans):
                if si < len(b.spans):
                    _, _, ke, ve = b.spans[si]
                    for codec, enc, buf in ((self._codecs.k, ke, kb), (self._codecs.v, ve, vb)):
                        self._codecs.decode_rows(codec, enc, buf.view(rows, cap, self.dim), out * ft, begin * ft,
                                                 count * ft, s, self._buffers.scratch)
                else:
                    if pk is None:
                        pk = b.pending[0][0] if len(b.pending) == 1 else torch.cat([p[0] for p in b.pending], 2)
                        pv = b.pending[0][1] if len(b.pending) == 1 else torch.cat([p[1] for p in b.pending], 2)
                    kb[:, :, out * ft:(out + count) * ft].copy_(pk[:, :, begin * ft:(begin + count) * ft])
                    vb[:, :, out * ft:(out + count) * ft].copy_(pv[:, :, begin * ft:(begin + count) * ft])
            if extra is not None:
                kb[:, :, n:n + t].copy_(ek)
                vb[:, :, n:n + t].copy_(ev)
        return kb[:, :, :n + t], vb[:, :, :n + t]

    def memory(self, block=None):
        """Bytes held: "k_spans", "v_spans" (encoded), "pending" (BF16 frames not yet in a span, K and V),
        "bf16" (the same frames in BF16), "ratio" (bf16 / held), "spans", "frames"; without a block,
        summed over all blocks plus "buffers" (read buffers and scratch)."""
        blocks = self._blocks if block is None else [self._block(block)]
        m = {"k_spans": 0, "v_spans": 0, "pending": 0, "bf16": 0, "spans": 0, "frames": 0}
        for b in blocks:
            m["k_spans"] += sum(s[2].nbytes for s in b.spans)
            m["v_spans"] += sum(s[3].nbytes for s in b.spans)
            m["pending"] += sum(2 * p[0].numel() * 2 for p in b.pending)
            m["bf16"] += 2 * 2 * self.batch * self.heads * b.frames * self.frame_tokens * self.dim
            m["spans"] += len(b.spans)
            m["frames"] += b.frames
        held = m["k_spans"] + m["v_spans"] + m["pending"]
        m["ratio"] = m["bf16"] / held if held else 0.0
        if block is None:
            m["buffers"] = self._buffers.nbytes()
        return m
