"""qvg.longcat: a compressed drop-in for LongCat-Video's `kv_cache_dict` (docs/INTEGRATIONS.md, "LongCat-Video").

LongCat-Video computes, once per segment, each transformer block's K and V of the condition frames
([batch, heads, tokens, D], keys after the QK norm and before RoPE) and reads them at every denoising
step, concatenated before the current latents' K and V; its own 3-D RoPE then rotates the
concatenation. This cache holds each block's K and V as one encoded span per role and decodes it at
each read into a buffer reused by the next read (one block's condition K/V in BF16 at a time):

    import qvg.longcat
    cache = qvg.longcat.LongCatKVCache(num_blocks=48, heads=32, dim=128, key="qvg", value="qvg")
    kv_cache_dict = cache.load(kv_cache_dict)          # after _cache_clean_latents: {block: (k, v)} encoded
    # in Attention.forward_with_kv_cache, with the block's entry kv_cache = kv_cache_dict.get(i):
    k_full, v_full = kv_cache.kv(extra=(k, v))          # [B, heads, Nc + N, D]: condition rows, then the chunk's

A cache of batch 1 serves a query batch of any size (classifier-free guidance's two halves) from one
encoded copy: kv() decodes it once into sample 0 of the output buffer and copies those rows to the
other samples (the concatenation the attention reads needs them there); history() returns the
decoded rows [1, heads, Nc, D] alone, which .expand(B, ...) broadcasts without copies. A cache of
batch B holds one encoded copy per sample (per-sample caches) and serves a query batch of B only.

offload=True is LongCat's offload_kv_cache, compressed: each block's encoded K and V are packed into
pinned host memory at load(), and a read copies them back into one of two device staging buffers on a
side stream, the next block's copy starting when a block is read (qvg._offload); reads give the same
bytes as without offload:

    cache = qvg.longcat.LongCatKVCache(48, 32, 128, key="qvg", value="qvg", offload=True)
"""
import torch

from . import _offload
from ._device_spans import Buffers, Codecs, check_bhtd, check_extra, check_tensor, resolve_device, stream_of
from ._plan import cache_batch_mode
from ._qvg import DeviceEncodedTensor

__all__ = ["LongCatKVCache", "LongCatLayerCache"]


class LongCatLayerCache:
    """One transformer block's condition K and V, encoded (an entry of LongCatKVCache)."""

    def __init__(self, parent, block, k_enc, v_enc, batch, tokens, store=None):
        self._parent = parent
        self.block = block
        self.nbytes = (k_enc.nbytes, v_enc.nbytes)  # of the encoded K and V
        # The encoded K and V: DeviceEncodedTensors [batch * heads, tokens, dim] held on the GPU, or (offload)
        # packed in `store` (a qvg._offload.HostStore, entry `block`), rebuilt on the GPU at each read.
        self._k, self._v = (None, None) if store is not None else (k_enc, v_enc)
        self._store = store
        self.batch = batch  # samples held: 1 (shared by any query batch) or B (one per query sample)
        self.tokens = tokens  # condition tokens (num_cond_latents x tokens per latent frame)

    def _encoded(self):
        """The encoded K and V on the GPU: held, or (offload) unpacked from the staged bytes."""
        if self._store is None:
            return self._k, self._v
        return self._parent._unpack(self._store, self.block)

    def _decode(self, buf, mode, query_batch, dtype):
        p = self._parent
        s = stream_of(p.device)
        cap = buf[0].shape[2]
        k_enc, v_enc = self._encoded()
        for codec, enc, out in ((p._codecs.k, k_enc, buf[0]), (p._codecs.v, v_enc, buf[1])):
            dst = out[0] if mode == "shared" else out.view(query_batch * p.heads, cap, p.dim)
            p._codecs.decode_rows(codec, enc, dst, 0, 0, self.tokens, s, p._buffers.scratch)
            if mode == "shared" and query_batch > 1:
                out[1:, :, :self.tokens].copy_(out[:1, :, :self.tokens].expand(query_batch - 1, -1, -1, -1))

    def history(self, dtype=torch.bfloat16):
        """The decoded condition K and V, [batch held, heads, Nc, D] (keys before RoPE), in a buffer reused by
        the next read. For a cache of batch 1, .expand(B, -1, -1, -1) gives a batch-B view without copies."""
        p = self._parent
        p._check_dtype(dtype)
        buf = p._buffer(self.batch, self.tokens, dtype)
        with torch.cuda.device(p.device):
            self._decode(buf, "shared" if self.batch == 1 else "per_sample", self.batch, dtype)
        return buf[0][:, :, :self.tokens], buf[1][:, :, :self.tokens]

    def kv(self, extra=None, dtype=torch.bfloat16):
        """The K and V the chunk attends to, [B, heads, Nc + N, D] (views of a buffer reused by the next read):
        the condition rows (keys before RoPE, as LongCat cached them), then extra=(k, v), the chunk's own
        [B, heads, N, D]; B is extra's batch (the cache's without extra). Rotate the keys with the
        pipeline's RoPE, as it rotated torch.cat([k_cache, k])."""
        p = self._parent
        p._check_dtype(dtype)
        b, t = self.batch, 0
        if extra is not None:
            ek, ev, b, t = check_extra(extra, p.heads, p.dim, p.device)
        mode = cache_batch_mode(self.batch, b)
        buf = p._buffer(b, self.tokens + t, dtype)
        with torch.cuda.device(p.device):
            self._decode(buf, mode, b, dtype)
            if extra is not None:
                buf[0][:, :, self.tokens:self.tokens + t].copy_(ek)
                buf[1][:, :, self.tokens:self.tokens + t].copy_(ev)
        n = self.tokens + t
        return buf[0][:, :, :n], buf[1][:, :, :n]

    def memory(self):
        """Bytes of the encoded K and V (on the GPU, or packed in host memory with offload)."""
        return {"k": self.nbytes[0], "v": self.nbytes[1], "bf16": 2 * 2 * self.batch * self._parent.heads
                * self.tokens * self._parent.dim}


class LongCatKVCache:
    """LongCat-Video's kv_cache_dict ({block index: (k, v)}), compressed.

    num_blocks, heads, dim: the transformer's (LongCat-Video 13.6B: 48 blocks, 32 heads, 128).
    key / value: codec specs (qvg.presets(); "bf16" stores BF16, for comparisons). device: the CUDA
    device (default: the current one). warm_start: each block's k-means of a new segment (load())
    starts from the previous segment's centroids of that block when the shapes are equal (qvg method).
    offload: keep each block's encoded K and V packed in pinned host memory, not on the GPU; a read
    copies the block's bytes to a staging buffer on a side stream (the next block's copy is issued
    while this one is decoded) and decodes from there. qvg and rtn codecs (the ones that pack).
    """

    def __init__(self, num_blocks=48, heads=32, dim=128, *, key="qvg", value="qvg", device=None, warm_start=True,
                 offload=False):
        for name, x in (("num_blocks", num_blocks), ("heads", heads), ("dim", dim)):
            if not isinstance(x, int) or isinstance(x, bool) or x < 1:
                raise ValueError(f"{name} must be a positive int, got {x!r}")
        if not isinstance(offload, bool):
            raise ValueError(f"offload must be True or False, got {offload!r}")
        self.device = resolve_device(device)
        self.num_blocks, self.heads, self.dim = num_blocks, heads, dim
        self.warm_start = warm_start
        self.offload = offload
        self._codecs = Codecs(key, value, self.device)
        if offload:
            self._check_packable()
            self._staging = _offload.Staging(self.device)
        self._buffers = Buffers(self.device)
        self._layers = {}
        # warm_start: block -> the last segment's encoded (k, v) of that block, or (offload) the HostStore
        # holding them packed
        self._warm = {}

    def _check_packable(self):
        for name, codec in (("key", self._codecs.k), ("value", self._codecs.v)):
            method = codec.spec.split(":", 1)[0]
            if not codec.group_quantized:
                raise ValueError(
                    f"offload=True keeps each block's encoded K and V as packed bytes in pinned host memory, which "
                    f"the qvg and rtn codecs give (DeviceEncodedTensor.pack); the {name} codec {codec.spec!r} "
                    f"({method}) is encoded on the host and has no packed form. Use a qvg or rtn spec, or "
                    "offload=False; for BF16 offload keep the pipeline's own offload_kv_cache (its BF16 dict on the "
                    "host) without this cache")

    @staticmethod
    def _check_dtype(dtype):
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float32, got {dtype}")

    def _buffer(self, batch, rows, dtype):
        tail = (self.dim,)
        return (self._buffers.get("k", (batch, self.heads), rows, tail, dtype),
                self._buffers.get("v", (batch, self.heads), rows, tail, dtype))

    def load(self, kv_cache_dict):
        """Encodes LongCat's {block: (k, v)} (each [batch, heads, tokens, D], CUDA or host tensors, as
        _cache_clean_latents returned them, offloaded or not) in place of what the cache held, on the
        current stream; returns self (use it where the pipeline used the dict). Checks every entry before
        encoding any."""
        if not hasattr(kv_cache_dict, "items"):
            raise TypeError(f"kv_cache_dict must be a dict {{block: (k, v)}}, got {type(kv_cache_dict).__name__}")
        entries = []
        for i, kv in kv_cache_dict.items():
            if not isinstance(i, int) or not 0 <= i < self.num_blocks:
                raise ValueError(f"block index {i!r} is not in 0 .. {self.num_blocks - 1}")
            if not isinstance(kv, (tuple, list)) or len(kv) != 2:
                raise TypeError(f"block {i}: the entry must be a pair (k, v), got {type(kv).__name__}")
            k, v = kv
            check_tensor(k, f"block {i} k")
            check_tensor(v, f"block {i} v")
            b, n = check_bhtd(k, f"block {i} k", self.heads, self.dim)
            if v.shape != k.shape:
                raise ValueError(f"block {i}: k and v must have one shape, got {list(k.shape)} and {list(v.shape)}")
            if n < 1:
                raise ValueError(f"block {i}: no tokens")
            entries.append((i, k, v, b, n))
        self.reset()
        s = stream_of(self.device)
        store = _offload.HostStore() if self.offload else None
        layers = {}
        with torch.cuda.device(self.device):
            for i, k, v, b, n in entries:
                shape = (b * self.heads, n, self.dim)
                wk, wv = self._warm_start(i, shape)
                ke = self._codecs.encode(self._codecs.k, k.to(self.device).reshape(shape), "key", s, wk)
                ve = self._codecs.encode(self._codecs.v, v.to(self.device).reshape(shape), "value", s, wv)
                if store is not None:
                    store.put(i, [self._packed(ke), self._packed(ve)], meta=(ke.spec, ve.spec, shape))
                if self.warm_start:
                    self._warm[i] = store if store is not None else (ke, ve)
                layers[i] = LongCatLayerCache(self, i, ke, ve, b, n, store)
        self._layers = layers
        return self

    def _warm_start(self, block, shape):
        """The previous segment's encoded K and V of `block` to start k-means from, or (None, None)
        (Codecs.encode uses them only for the qvg method and an equal shape)."""
        warm = self._warm.get(block) if self.warm_start else None
        if not self.offload:
            return warm or (None, None)
        if warm is None or warm.meta(block)[2] != shape or not (self._codecs.k.clustered or self._codecs.v.clustered):
            return None, None  # (no qvg codec: nothing to copy back)
        return self._unpack(warm, block)

    def _packed(self, enc):
        """enc's parts packed into a new uint8 CUDA tensor (current stream)."""
        out = torch.empty(enc.nbytes, dtype=torch.uint8, device=self.device)
        return enc.pack(out, stream=stream_of(self.device))

    def _unpack(self, store, block):
        """The encoded K and V of `block` rebuilt on the GPU from `store`'s bytes, on the current stream
        (staged: the copy of the store's next block starts)."""
        k_spec, v_spec, shape = store.meta(block)
        s = stream_of(self.device)
        with self._staging.staged(store, block) as (kb, vb):
            return (DeviceEncodedTensor.unpack(kb, k_spec, "key", shape, stream=s),
                    DeviceEncodedTensor.unpack(vb, v_spec, "value", shape, stream=s))

    def reset(self):
        """Drops every block's condition K/V (the next segment's load() fills them again); the read buffers
        and the warm-start state are kept (with warm_start: the last segment's encoded K/V, on the GPU
        or, with offload, packed in pinned host memory)."""
        self._layers = {}

    def _stores(self):
        """The HostStores held (offload): the loaded blocks' and the warm starts'."""
        held = [layer._store for layer in self._layers.values()] + list(self._warm.values())
        return list({id(s): s for s in held if isinstance(s, _offload.HostStore)}.values())

    # ---- the dict interface the pipeline uses ------------------------------------------------
    def get(self, block, default=None):
        return self._layers.get(block, default)

    def __getitem__(self, block):
        return self._layers[block]

    def __contains__(self, block):
        return block in self._layers

    def __len__(self):
        return len(self._layers)

    def keys(self):
        return self._layers.keys()

    def items(self):
        return self._layers.items()

    def memory(self):
        """Bytes: "k", "v" (encoded, all blocks), "bf16" (what the dict held in BF16), "ratio", "buffers"
        (the reused read buffers and scratch); "on_gpu" (encoded bytes held on the GPU: k + v, 0 with
        offload), "host_pinned" (pinned host memory held: the loaded segment's packed blocks, and after
        reset() or a load of other blocks those kept for warm starts), "host_used" (of which entries),
        "staging" (the device staging buffers)."""
        m = {"k": 0, "v": 0, "bf16": 0}
        for layer in self._layers.values():
            for key, val in layer.memory().items():
                m[key] += val
        m["ratio"] = m["bf16"] / (m["k"] + m["v"]) if m["k"] + m["v"] else 0.0
        m["buffers"] = self._buffers.nbytes()
        m["on_gpu"] = 0 if self.offload else m["k"] + m["v"]
        m["host_pinned"] = sum(s.pinned for s in self._stores())
        m["host_used"] = sum(s.nbytes for s in self._stores())
        m["staging"] = self._staging.nbytes if self.offload else 0
        return m

    @property
    def h2d_bytes(self):
        """Bytes copied from host memory to the GPU by reads and warm starts since the cache was made
        (offload; 0 otherwise): per denoising step, about memory()["host_used"]."""
        return self._staging.copied if self.offload else 0
