"""qvg.torch: the compressed KV cache for PyTorch attention (CUDA tensors in, CUDA tensors out).

    import qvg.torch
    cache = qvg.torch.KVCache(layers=30, heads=12, dim=128, key="qvg", value="qvg",
                              chunk_tokens=4680, quant_factor=8)
    # in layer i's attention, once per chunk, with the chunk's K and V ([1, T, heads, D]):
    cache.append(i, k, v)
    k_all, v_all = cache.kv(i)                 # history, BF16 [1, n, heads, D]
    k_all, v_all = cache.kv(i, extra=(k, v))   # history followed by the current chunk

Everything runs on the current CUDA stream (torch.cuda.current_stream()) and nothing waits for the
device: spans are encoded and decoded by qvg's kernels (qvg.DeviceKVCache), and kv() decodes into one
buffer per dtype that the next kv() call reuses (one layer's history in BF16 at a time, as the
model's attention consumes it); .clone() what must outlive the next call.

SelfForcingKVCache is a drop-in for the per-block cache dicts of Self-Forcing-style pipelines
(CausalWanModel: "k", "v", "global_end_index", "local_end_index", a sink and a rolling window).
Reference: docs/PYTHON.md, "PyTorch".
"""
import torch

from ._qvg import DeviceKVCache
from .budget import cache_specs

__all__ = ["KVCache", "SelfForcingKVCache", "SelfForcingBlockCache"]

_LAYOUTS = ("bthd", "bhtd")


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


class KVCache:
    """A compressed KV cache for all layers of a model, on one CUDA device.

    layers, heads, dim: the model's. key / value: codec specs (qvg.presets(); "bf16" keeps the history
    uncompressed). chunk_tokens: tokens every appended chunk must have (0: any). quant_factor,
    keep_recent, sink, window_chunks, window_tokens: the span policy of qvg.StreamingKVCache (spans of
    quant_factor chunks; sink chunks never compressed nor evicted; windows evict the oldest chunks).
    rope: "none" (keys cached as given), "3d" (Wan's 3-D RoPE: keys appended before RoPE, rotated on
    read; append takes frame= and grid=) or "1d". layout: "bthd" ([1, tokens, heads, D], Self-Forcing's)
    or "bhtd" ([1, heads, tokens, D], scaled_dot_product_attention's), for append's inputs and kv()'s
    outputs. device: the CUDA device (default: the current one). overlap_encode: False (default): a span
    is encoded on the current stream and read encoded at once (kv() equals qvg.StreamingKVCache's read()
    bit for bit). True: each span is encoded on a stream of the cache's own while the model goes on, and
    kv() reads the span's chunks in BF16 until the layer's next append (then its encoded form), holding
    the BF16 copies of the last span meanwhile (memory() counts them). In a Wan-1.3B-shaped loop on an
    H200 True saved no time (the model keeps the GPU busy; docs/BENCHMARKS.md). first_head: the model's
    index of this cache's first head when it holds some of the heads (head-sharded sequence parallelism,
    Ulysses: `heads` is then the rank's count); its spans then equal, byte for byte, those heads of a cache
    of all heads (qvg.distributed). bits: a budget of bits per value; key and value are then each the
    configuration of their family with the lowest expected error within it on spans of chunk_tokens *
    quant_factor tokens (qvg.budget.cache_specs; needs chunk_tokens > 0). batch_encodes: True: a span is
    encoded later, with the spans the other layers form, in one batch (the K of every layer, then the V)
    by flush() or by the first append of a later chunk; until then kv() reads its chunks in BF16. The
    spans' bytes equal those encoded at once. zero_copy_reads: True (layout "bthd", rope "none", kv() in
    bfloat16): kv() returns views of memory the cache owns, where each layer's chunks still in BF16 already
    sit after the decoded history (qvg.DeviceKVCache's contiguous_views, docs/PYTHON.md): it decodes the spans
    and copies the sink, not the waiting chunks; kv(extra=(k, v)) copies the chunk into the slot after the
    history, and append() of those same tensors next takes them from there. The same K and V as without it;
    the views' rows after the decoded history are the chunks the cache stores: do not write into them.
    """

    def __init__(self, layers, heads, dim, *, key="qvg", value="qvg", bits=None, chunk_tokens=0, quant_factor=8,
                 keep_recent=0, sink=0, window_chunks=0, window_tokens=0, rope="none", rope_theta=10000.0,
                 rope_pairing="interleaved", warm_start=True, layout="bthd", device=None, overlap_encode=False,
                 first_head=0, batch_encodes=False, zero_copy_reads=False):
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
        if zero_copy_reads and layout != "bthd":
            raise ValueError("zero_copy_reads hands out token-major views: layout must be \"bthd\"")
        if zero_copy_reads and rope != "none":
            raise ValueError("zero_copy_reads caches keys as attention reads them: rope must be \"none\" (append "
                             "roped keys)")
        if not torch.cuda.is_available():
            raise RuntimeError("qvg.torch.KVCache needs a CUDA device (torch.cuda.is_available() is False)")
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"device must be a CUDA device, got {self.device}")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.layout = layout
        key, value = cache_specs(key, value, bits, chunk_tokens=chunk_tokens, quant_factor=quant_factor, dim=dim)
        self.key, self.value = key, value
        self._args = (layers, heads, dim)
        self._kwargs = dict(key=key, value=value, chunk_tokens=chunk_tokens, quant_factor=quant_factor,
                            keep_recent=keep_recent, sink=sink, window_chunks=window_chunks,
                            window_tokens=window_tokens, rope=rope, rope_theta=rope_theta,
                            rope_pairing=rope_pairing, warm_start=warm_start, overlap_encode=overlap_encode,
                            first_head=first_head, batch_encodes=batch_encodes,
                            contiguous_views=bool(zero_copy_reads))
        self.zero_copy_reads = bool(zero_copy_reads)
        self.reset()
        self._buffers = {}  # dtype -> (k, v), each [1, heads, capacity, dim]

    def reset(self):
        """Empties every layer (a new video); kv()'s buffers are kept."""
        with torch.cuda.device(self.device):
            self._cache = DeviceKVCache(*self._args, **self._kwargs)
        self._slot = {}  # zero_copy_reads: layer -> (k, v) last copied into the layer's slot by kv()

    # ---- properties -------------------------------------------------------------------------
    @property
    def layers(self):
        return self._cache.layers

    @property
    def heads(self):
        return self._cache.heads

    @property
    def dim(self):
        return self._cache.dim

    @property
    def native(self):
        """The qvg.DeviceKVCache underneath."""
        return self._cache

    @property
    def pending_spans(self):
        """Spans formed but not encoded yet (batch_encodes)."""
        return self._cache.pending_spans

    def flush(self):
        """batch_encodes: encodes every pending span now, on the current stream."""
        with torch.cuda.device(self.device):
            self._cache.flush(stream=_stream(self.device))

    # ---- append / kv -------------------------------------------------------------------------
    def _check(self, x, name):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.device != self.device:
            raise ValueError(f"{name} is on {x.device}, the cache on {self.device}")
        if x.dim() != 4 or x.shape[0] != 1:
            want = "[1, tokens, heads, dim]" if self.layout == "bthd" else "[1, heads, tokens, dim]"
            raise ValueError(f"{name} must be {want} (batch 1), got shape {list(x.shape)}")

    def append(self, layer, k, v, *, frame=None, grid=None, positions=None):
        """Adds one chunk's K and V (CUDA tensors in the cache's layout, float32 / bfloat16 / float16)
        to a layer and applies the span policy. With rope="3d": frame (the chunk's first latent frame)
        and grid=(height, width) of the latent frame, or positions (host int32, tokens x 3); rope="1d":
        frame is the first position. Returns the report {chunk, spans, evicted}."""
        self._check(k, "k")
        self._check(v, "v")
        kw = {}
        if positions is not None:
            kw["positions"] = positions
        if frame is not None:
            kw["first"] = int(frame)
            if grid is not None:
                kw["height"], kw["width"] = (int(g) for g in grid)
        with torch.cuda.device(self.device):
            slot = self._slot.pop(layer, None)
            if slot is not None and slot[0] is k and slot[1] is v and not kw:  # already in the slot, in BF16
                return self._cache.append_extra(layer, k.shape[1], stream=_stream(self.device))
            return self._cache.append(layer, k, v, layout="thd" if self.layout == "bthd" else "htd",
                                      stream=_stream(self.device), **kw)

    def _buffer(self, rows, dtype):
        buf = self._buffers.get(dtype)
        if buf is None or buf[0].shape[2] < rows:
            cap = max(rows, int(1.25 * buf[0].shape[2]) if buf is not None else rows)
            cap = (cap + 63) // 64 * 64
            shape = (1, self.heads, cap, self.dim)
            buf = (torch.empty(shape, dtype=dtype, device=self.device),
                   torch.empty(shape, dtype=dtype, device=self.device))
            self._buffers[dtype] = buf
        return buf

    def kv(self, layer, *, dtype=torch.bfloat16, extra=None):
        """The layer's live K and V (keys rotated with RoPE on read), decoded on the GPU into a buffer
        reused by the next call, as views [1, n, heads, D] ("bthd") or [1, heads, n, D] ("bhtd").
        extra=(k, v): a chunk (the cache's layout) placed after the history, e.g. the chunk being
        denoised. dtype: torch.bfloat16 or torch.float32."""
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float32, got {dtype}")
        if self.zero_copy_reads:
            return self._kv_view(layer, dtype, extra)
        n = self._cache.live_tokens(layer)
        ek, ev, t = self._extra_rows(extra)
        kb, vb = self._buffer(n + t, dtype)
        with torch.cuda.device(self.device):
            if n > 0 or extra is None:  # an empty layer without extra rows: read() says so
                self._cache.read(layer, kb, vb, stream=_stream(self.device))
        k, v = kb[:, :, :n + t], vb[:, :, :n + t]
        if extra is not None:
            if self.layout == "bthd":
                k[:, :, n:].copy_(ek.transpose(1, 2))
                v[:, :, n:].copy_(ev.transpose(1, 2))
            else:
                k[:, :, n:].copy_(ek)
                v[:, :, n:].copy_(ev)
        if self.layout == "bthd":
            return k.transpose(1, 2), v.transpose(1, 2)
        return k, v

    def _extra_rows(self, extra):
        """kv()'s extra=(k, v), checked: (k, v, their tokens), or (None, None, 0)."""
        if extra is None:
            return None, None, 0
        ek, ev = extra
        self._check(ek, "extra k")
        self._check(ev, "extra v")
        return ek, ev, ek.shape[1] if self.layout == "bthd" else ek.shape[2]

    def _kv_view(self, layer, dtype, extra):
        """zero_copy_reads: kv() as views of the cache's own memory."""
        if dtype != torch.bfloat16:
            raise ValueError("zero_copy_reads: kv() returns the cache's BF16 rows (dtype must be torch.bfloat16)")
        ek, ev, t = self._extra_rows(extra)
        if extra is not None and (ek.shape != ev.shape or ek.shape[2:] != (self.heads, self.dim)):
            raise ValueError(f"extra k and v must both be [1, tokens, {self.heads}, {self.dim}], got "
                             f"{list(ek.shape)} and {list(ev.shape)}")
        self._slot.pop(layer, None)
        with torch.cuda.device(self.device):
            kp, vp, n, _ = self._cache.view(layer, extra=t, stream=_stream(self.device))
        k, v = (_device_rows(p, n + t, self.heads, self.dim, self.device, self._cache) for p in (kp, vp))
        if extra is not None:
            k[:, n:].copy_(ek)
            v[:, n:].copy_(ev)
            if ek.dtype == torch.bfloat16:  # the slot holds them bit for bit: append() takes them from there
                self._slot[layer] = (ek, ev)
        return k, v

    # ---- queries -----------------------------------------------------------------------------
    def live_tokens(self, layer):
        return self._cache.live_tokens(layer)

    def chunks_appended(self, layer):
        return self._cache.chunks_appended(layer)

    def memory(self, layer=None):
        """Exact bytes held by the compressed state (qvg.StreamingKVCache.memory's dict), plus
        "buffers": the bytes of kv()'s reused output buffers and "scratch": the cache's device scratch."""
        m = self._cache.memory(layer)
        m["buffers"] = sum(t.numel() * t.element_size() for pair in self._buffers.values() for t in pair)
        m["scratch"] = self._cache.scratch_bytes
        if self.zero_copy_reads:  # the pages behind the views (own: the BF16 chunks counted above, plus slots)
            m["views"] = self._cache.view_memory
        return m


class _DeviceRows:
    """__cuda_array_interface__ of int16 rows [1, rows, heads, dim] at a device address the cache owns
    (kept alive with the tensors made from it)."""

    def __init__(self, ptr, rows, heads, dim, owner):
        self._owner = owner
        self.__cuda_array_interface__ = {"shape": (1, rows, heads, dim), "typestr": "<i2", "data": (ptr, False),
                                         "version": 3, "strides": None, "stream": None}


def _device_rows(ptr, rows, heads, dim, device, owner):
    """A bfloat16 tensor [1, rows, heads, dim] over the cache's memory at ptr, without a copy."""
    if rows == 0:
        return torch.empty((1, 0, heads, dim), dtype=torch.bfloat16, device=device)
    return torch.as_tensor(_DeviceRows(ptr, rows, heads, dim, owner), device=device).view(torch.bfloat16)


class SelfForcingBlockCache:
    """One transformer block's cache in a SelfForcingKVCache: what the block's dict was."""

    def __init__(self, parent, layer):
        self._parent = parent
        self._layer = layer
        self._pending = None  # (k, v, start) of the chunk being generated: the last values written
        self._moved = False  # batch_encodes: the pending chunk is in the compressed cache already
        self._global_end = 0

    def __getitem__(self, name):
        """"global_end_index" / "local_end_index" as the dict held them (int64 tensors on the device)."""
        if name == "global_end_index":
            return torch.tensor([self._global_end], dtype=torch.long, device=self._parent.device)
        if name == "local_end_index":
            n = self._parent.cache.live_tokens(self._layer)
            pending = 0 if self._pending is None or self._moved else self._pending[0].shape[1]
            return torch.tensor([n + pending], dtype=torch.long, device=self._parent.device)
        raise KeyError(f"{name!r}: a qvg block cache has no tensor {name!r} (its K/V are compressed; use update())")

    def update(self, roped_key, v, current_start):
        """What CausalWanSelfAttention does with its cache dict, in one call: store the chunk's keys
        (after RoPE, as the block computed them) and values ([1, tokens, heads, D]) at token
        current_start, and return the K and V the chunk attends to ([1, n, heads, D]: the sink, the
        window of history and the chunk). Calls with the same current_start (the denoising steps and
        the clean pass) overwrite the chunk; the first call of the next chunk moves its last values
        into the compressed cache."""
        if roped_key.dim() != 4 or roped_key.shape != v.shape:
            raise ValueError(f"roped_key and v must both be [1, tokens, heads, D], got {list(roped_key.shape)} "
                             f"and {list(v.shape)}")
        tokens = roped_key.shape[1]
        end = current_start + tokens
        if end > self._global_end:
            if self._pending is not None:
                if current_start != self._pending[2] + self._pending[0].shape[1]:
                    raise ValueError(f"the next chunk must start at token {self._pending[2] + self._pending[0].shape[1]}"
                                     f", got {current_start}")
                if self._parent.batch_encodes:  # every block's chunk in, then their spans in one batch
                    self._parent._move_pending(self._pending[2])
                elif not self._moved:
                    pk, pv, _ = self._pending
                    self._parent.cache.append(self._layer, pk, pv)
            elif current_start != 0:
                raise ValueError(f"the first chunk must start at token 0, got {current_start}")
            self._global_end = end
        elif self._pending is None or current_start != self._pending[2]:
            raise ValueError(f"tokens [{current_start}, {end}) are already in the compressed history: only the "
                             f"chunk being generated (from token {self._pending[2] if self._pending else 0}) can "
                             "be written again")
        self._pending = (roped_key, v, current_start)
        self._moved = False
        k_all, v_all = self._parent.cache.kv(self._layer, extra=(roped_key, v))
        m = self._parent.max_attention_size
        if m is not None and k_all.shape[1] > m:  # the attention reads the buffer's last m rows
            k_all, v_all = k_all[:, -m:], v_all[:, -m:]
        return k_all, v_all

    def reset(self):
        self._pending = None
        self._moved = False
        self._global_end = 0


class SelfForcingKVCache:
    """A drop-in for Self-Forcing's KV cache (a list with one dict per transformer block): index it by
    block and call update() where the block wrote its dict (see SelfForcingBlockCache.update).

    frame_seqlen: tokens per latent frame (Wan-1.3B at 480p: 1560); frames_per_chunk: latent frames
    per generated chunk (3). local_attn_size: frames attended, sink included, as Self-Forcing counts
    them (-1: everything); sink_size: frames at the start never evicted (a multiple of
    frames_per_chunk). key / value / bits / quant_factor / keep_recent / overlap_encode / first_head: as
    KVCache (Self-Forcing's span: 8 chunks; bits= chooses for spans of quant_factor x the chunk's tokens).
    max_attention_size: update() returns only the last max_attention_size rows of the sink, history and
    chunk, as the block's attention slices its buffer (None: all of them). batch_encodes: at the first
    update() of a chunk, every block's finished chunk goes into the cache at once and the spans they
    complete are encoded together (KVCache's batch_encodes). zero_copy_reads: update() returns views of the
    cache's memory in which the history's BF16 chunks already sit before the chunk (KVCache's
    zero_copy_reads): the same K and V, without copying the chunks that wait for their span at every call.
    """

    def __init__(self, num_blocks=30, heads=12, dim=128, *, frame_seqlen=1560, frames_per_chunk=3,
                 local_attn_size=-1, sink_size=0, key="qvg", value="qvg", bits=None, quant_factor=8, device=None,
                 overlap_encode=False, first_head=0, batch_encodes=False, keep_recent=0, max_attention_size=None,
                 zero_copy_reads=False):
        if not torch.cuda.is_available():
            raise RuntimeError("qvg.torch.SelfForcingKVCache needs a CUDA device (torch.cuda.is_available() is "
                               "False)")
        chunk = frame_seqlen * frames_per_chunk
        if sink_size % frames_per_chunk:
            raise ValueError(f"sink_size ({sink_size} frames) must be a multiple of frames_per_chunk "
                             f"({frames_per_chunk})")
        window = 0
        if local_attn_size != -1:
            # Self-Forcing's buffer holds local_attn_size frames: the sink, the history and the chunk.
            window = (local_attn_size - sink_size) * frame_seqlen - chunk
            if window < chunk:
                raise ValueError(f"local_attn_size {local_attn_size} leaves no room for history beside a sink of "
                                 f"{sink_size} frames and a chunk of {frames_per_chunk}")
        if max_attention_size is not None and (not isinstance(max_attention_size, int)
                                               or isinstance(max_attention_size, bool) or max_attention_size < 1):
            raise ValueError(f"max_attention_size must be a positive int or None, got {max_attention_size!r}")
        self.max_attention_size = max_attention_size
        self.cache = KVCache(num_blocks, heads, dim, key=key, value=value, bits=bits, chunk_tokens=chunk,
                             quant_factor=quant_factor, keep_recent=keep_recent, sink=sink_size // frames_per_chunk,
                             window_tokens=window, layout="bthd", device=device, overlap_encode=overlap_encode,
                             first_head=first_head, batch_encodes=batch_encodes, zero_copy_reads=zero_copy_reads)
        self.batch_encodes = batch_encodes
        self.device = self.cache.device
        self._blocks = [SelfForcingBlockCache(self, i) for i in range(num_blocks)]

    def _move_pending(self, start):
        """batch_encodes: appends every block's chunk that starts at `start` and is not in the cache yet,
        then encodes the spans they complete in one batch."""
        for b in self._blocks:
            if b._pending is not None and not b._moved and b._pending[2] == start:
                self.cache.append(b._layer, b._pending[0], b._pending[1])
                b._moved = True
        self.cache.flush()

    def __len__(self):
        return len(self._blocks)

    def __getitem__(self, i):
        return self._blocks[i]

    def __iter__(self):
        return iter(self._blocks)

    def reset(self):
        """Empties the cache (a new video), as zeroing the dicts' end indices did."""
        self.cache.reset()
        for b in self._blocks:
            b.reset()

    def memory(self):
        """KVCache.memory() of the compressed history, plus "pending": the bytes of the chunks being
        generated (one per block, held in BF16 until the next chunk starts)."""
        m = self.cache.memory()
        m["pending"] = sum(b._pending[0].numel() * b._pending[0].element_size() * 2
                           for b in self._blocks if b._pending is not None and not b._moved)
        return m
