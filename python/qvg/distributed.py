"""qvg.distributed: compressed K/V history across the ranks of torch.distributed (sequence parallelism).

Head-sharded (Ulysses): after the all-to-all every rank holds whole heads. Give each rank its own
qvg.torch.KVCache of its heads with first_head = the model's index of its first head: k-means runs
per head, so no traffic is added, and each rank's spans equal those heads of a one-device cache byte
for byte (see head_range).

Ring attention over compressed history: every rank owns whole spans of a layer's history (a
HistoryShard). ring_attention() passes each rank's spans around the ring in compressed form (one
packed byte buffer a shard: codes, scales, ids, centroids), decodes each shard where it arrives and
merges the partial attention outputs with the online-softmax state (the running log-sum-exp). The
next shard's transfer (torch.distributed send / recv: NCCL, or gloo through host memory) is in
flight while the current one is decoded and attended. Without a process group, or at world size 1,
it is the one-device computation.

    import qvg.distributed as qd
    shard = qd.HistoryShard(heads=32, dim=128, key="qvg", value="qvg")   # this rank's spans of a layer
    shard.add(k_span, v_span)      # [1, heads, tokens, dim] CUDA tensors: encoded on the GPU
    shard.sync(group)              # collective, after any rank added spans: the ranks' span sizes
    out = qd.ring_attention(q, shard, group=group, extra=(k_tail, v_tail))

Reference: docs/PYTHON.md, "Several GPUs".
"""
import math

import torch
import torch.distributed as dist

import qvg

__all__ = ["HistoryShard", "ring_attention", "head_range", "attention_with_lse", "merge_partial"]

# EncodedTensor parts in docs/FORMAT.md's order (the host form's packed layout, as the device's pack()).
_PARTS = ("codes", "scales", "zero_points", "span_scales", "centroids", "ids", "full_precision")


def head_range(heads, rank, world_size):
    """The heads [first, first + count) of `rank` when `heads` are split evenly over world_size ranks
    (Ulysses); pass first as KVCache's first_head and count as its heads."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size}")
    if heads % world_size:
        raise ValueError(f"{heads} heads do not split evenly over {world_size} ranks")
    count = heads // world_size
    return rank * count, count


def attention_with_lse(q, k, v, scale=None):
    """softmax(q kᵀ · scale) v and the rows' log-sum-exp of the scores: q [1, H, Tq, D], k / v
    [1, H, Tk, D] -> (out float32 [1, H, Tq, D], lse float32 [1, H, Tq]). CUDA bf16 / fp16: PyTorch's
    flash-attention kernel; otherwise (and where it refuses the shapes) float32 arithmetic."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and k.dtype == q.dtype and v.dtype == q.dtype:
        try:
            r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
            return r[0].float(), r[1].float()
        except RuntimeError:
            pass  # shapes the kernel does not take: the arithmetic below
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v.float()), lse


def merge_partial(acc, part):
    """Online-softmax merge of two partial results (out, lse) over disjoint keys; acc may be None."""
    if acc is None:
        return part
    o1, l1 = acc
    o2, l2 = part
    lse = torch.logaddexp(l1, l2)
    return o1 * torch.exp(l1 - lse).unsqueeze(-1) + o2 * torch.exp(l2 - lse).unsqueeze(-1), lse


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


class HistoryShard:
    """This rank's whole spans of one layer's K/V history.

    heads, dim: the shard's (the same on every rank). key / value: codec specs of the spans, or None
    for uncompressed BF16 (the baseline ring). device: "cuda" (or a CUDA device: spans encoded by
    qvg.DeviceCodec and kept on the GPU; qvg and rtn) or "cpu" (the host codecs, float32; any method).
    warm_start: each span's k-means starts from the last span's centroids (as the streaming caches).
    """

    def __init__(self, heads, dim, *, key="qvg", value="qvg", device="cuda", warm_start=True):
        self.heads, self.dim = int(heads), int(dim)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cuda", "cpu"):
            raise ValueError(f"device must be CUDA or the CPU, got {self.device}")
        self.specs = {"key": key, "value": value}
        self.warm_start = warm_start
        self._codecs = {}
        for role, spec in self.specs.items():
            if spec is None:
                continue
            if self.device.type == "cuda":
                with torch.cuda.device(self.device):
                    self._codecs[role] = qvg.DeviceCodec(spec)
            else:
                self._codecs[role] = qvg.Codec(spec)
        self._spans = []     # (tokens, {role: encoded tensor or BF16 tensor [H, n, D]})
        self._payload = None  # (bytes tensor, meta) of the spans, made once after a change
        self._ring_meta = None  # every rank's meta, from sync()

    # ---- spans ------------------------------------------------------------------------------
    def _as_heads(self, x, name):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 4 and x.shape[0] == 1:
            x = x[0]
        if x.dim() != 3 or x.shape[0] != self.heads or x.shape[2] != self.dim:
            raise ValueError(f"{name} must be [1, {self.heads}, tokens, {self.dim}] or [{self.heads}, tokens, "
                             f"{self.dim}], got {list(x.shape)}")
        if x.device != self.device:
            raise ValueError(f"{name} is on {x.device}, the shard on {self.device}")
        return x

    def add(self, k, v):
        """Appends a span: K and V [1, heads, tokens, dim] (or [heads, tokens, dim]) on the shard's
        device, encoded now (CUDA: on the current stream). Call sync() on every rank before the next
        ring_attention()."""
        k, v = self._as_heads(k, "k"), self._as_heads(v, "v")
        if k.shape != v.shape:
            raise ValueError(f"k and v differ in shape: {list(k.shape)} and {list(v.shape)}")
        stored = {}
        for role, x in (("key", k), ("value", v)):
            codec = self._codecs.get(role)
            if codec is None:
                stored[role] = x.to(torch.bfloat16).contiguous()
                continue
            warm = self._spans[-1][1][role] if self.warm_start and self._spans else None
            if self.device.type == "cuda":
                with torch.cuda.device(self.device):
                    stored[role] = codec.encode(x.contiguous(), role=role, stream=_stream(self.device),
                                                warm_start=warm)
            else:
                stored[role] = codec.encode(x.float().numpy(), role=role, warm_start=warm)
        self._spans.append((int(k.shape[1]), stored))
        self._payload = None
        self._ring_meta = None

    @property
    def spans(self):
        """Tokens of each span."""
        return [n for n, _ in self._spans]

    @property
    def tokens(self):
        return sum(self.spans)

    @property
    def nbytes(self):
        """Bytes of the spans as stored (and as sent around the ring)."""
        return int(self._packed()[0].numel())

    # ---- the packed form ----------------------------------------------------------------------
    def _packed(self):
        """(uint8 tensor on the shard's device, meta): every span's K then V, one after the other."""
        if self._payload is not None:
            return self._payload
        pieces, meta = [], []
        for n, stored in self._spans:
            entry = [n]
            for role in ("key", "value"):
                x = stored[role]
                if isinstance(x, torch.Tensor):  # uncompressed BF16
                    pieces.append(x.reshape(-1).view(torch.uint8))
                    entry.append(None)
                elif self.device.type == "cuda":
                    buf = torch.empty(x.nbytes, dtype=torch.uint8, device=self.device)
                    with torch.cuda.device(self.device):
                        x.pack(buf, stream=_stream(self.device))
                    pieces.append(buf)
                    entry.append(x.spec)
                else:
                    spec, _, _, parts = x.__getstate__()
                    sizes = [len(parts.get(p, b"")) for p in _PARTS]
                    data = b"".join(parts.get(p, b"") for p in _PARTS)
                    pieces.append(torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else
                                  torch.empty(0, dtype=torch.uint8))
                    entry.append((spec, sizes))
                entry.append(int(pieces[-1].numel()))
            meta.append(tuple(entry))
        buf = torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.uint8, device=self.device)
        self._payload = (buf, tuple(meta))
        return self._payload

    def _decoded(self, buf, meta, dtype):
        """The spans of a packed buffer (any rank's) as BF16 / float32 K and V [1, H, n, D], in order."""
        off = 0
        for n, kspec, kbytes, vspec, vbytes in meta:
            out = []
            for role, spec, nb in (("key", kspec, kbytes), ("value", vspec, vbytes)):
                piece = buf[off:off + nb]
                off += nb
                shape = (self.heads, n, self.dim)
                if spec is None:
                    out.append(piece.view(torch.bfloat16).view(1, *shape).to(dtype))
                elif self.device.type == "cuda":
                    s = _stream(self.device)
                    with torch.cuda.device(self.device):
                        e = qvg.DeviceEncodedTensor.unpack(piece, spec, role, shape, stream=s)
                        x = torch.empty(shape, dtype=torch.bfloat16, device=self.device)
                        self._codecs[role].decode(e, out=x, stream=s)
                    out.append(x.unsqueeze(0).to(dtype))
                else:
                    sp, sizes = spec
                    data, parts, p0 = piece.numpy().tobytes(), {}, 0
                    for name, size in zip(_PARTS, sizes):
                        parts[name] = data[p0:p0 + size]
                        p0 += size
                    e = qvg.EncodedTensor.__new__(qvg.EncodedTensor)
                    e.__setstate__((sp, role, shape, parts))
                    out.append(torch.from_numpy(qvg.Codec(sp).decode(e)).unsqueeze(0).to(dtype))
            yield out[0], out[1]

    # ---- collective ---------------------------------------------------------------------------
    def sync(self, group=None):
        """Collective (every rank of the group calls it, after any rank added spans): exchanges the
        ranks' span sizes, which ring_attention needs to receive and decode their shards."""
        mine = (int(self._packed()[0].numel()), self._packed()[1])
        if group is None and not (dist.is_available() and dist.is_initialized()):
            self._ring_meta = [mine]
            return
        world = dist.get_world_size(group)
        got = [None] * world
        dist.all_gather_object(got, mine, group=group)
        self._ring_meta = got


def _send_recv(send, recv_bytes, group, device):
    """Posts send -> next rank and recv <- previous rank; returns (wait, the receive buffer)."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    nxt = dist.get_global_rank(group, (rank + 1) % world) if group is not None else (rank + 1) % world
    prv = dist.get_global_rank(group, (rank - 1) % world) if group is not None else (rank - 1) % world
    staged = dist.get_backend(group) == "gloo" and device.type == "cuda"  # gloo moves host memory
    out = send.cpu() if staged else send
    into = torch.empty(recv_bytes, dtype=torch.uint8, device="cpu" if staged else device)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt, group),
                                   dist.P2POp(dist.irecv, into, prv, group)])

    def wait(_keep=out):  # the send buffer lives until the transfer is done
        for r in reqs:
            r.wait()
        return into.to(device, non_blocking=False) if staged else into
    return wait


def ring_attention(q, shard, *, group=None, extra=None, scale=None):
    """Attention of this rank's queries q [1, H, Tq, D] over every rank's shard of the history (passed
    around the ring compressed, decoded on arrival) and, if given, extra=(k, v) [1, H, T, D] attended
    by this rank only (e.g. its uncompressed tail and the current chunk). Returns [1, H, Tq, D] in q's
    dtype. Every rank of the group calls it (a collective), after the same sync()."""
    if shard._ring_meta is None:
        raise RuntimeError("HistoryShard.sync() must run on every rank after spans are added")
    if q.dim() != 4 or q.shape[0] != 1 or q.shape[1] != shard.heads or q.shape[3] != shard.dim:
        raise ValueError(f"q must be [1, {shard.heads}, tokens, {shard.dim}], got {list(q.shape)}")
    world = len(shard._ring_meta)
    rank = dist.get_rank(group) if world > 1 else 0
    dtype = q.dtype if q.is_cuda else torch.float32
    acc = None
    if extra is not None:
        acc = attention_with_lse(q, extra[0].to(dtype), extra[1].to(dtype), scale)
    cur = shard._packed()[0]
    for step in range(world):
        src = (rank - step) % world  # the rank whose shard `cur` is
        wait = None
        if step + 1 < world:  # the next shard travels while this one is decoded and attended
            wait = _send_recv(cur, shard._ring_meta[(src - 1) % world][0], group, shard.device)
        for k, v in shard._decoded(cur, shard._ring_meta[src][1], dtype):
            acc = merge_partial(acc, attention_with_lse(q, k, v, scale))
        if wait is not None:
            cur = wait()
    if acc is None:
        raise ValueError("nothing to attend: every shard is empty and no extra K/V was given")
    return acc[0].to(q.dtype)
