"""What the pipeline adapters share: CUDA tensor checks, the current stream, reused output buffers, and
a decode of rows of an encoded span into a larger buffer (qvg.DeviceCodec.decode_rows where the method
has it, a whole decode into scratch and a copy otherwise). Imports torch."""
import torch

from ._qvg import DeviceCodec



def stream_of(device):
    return torch.cuda.current_stream(device).cuda_stream


def resolve_device(device):
    if not torch.cuda.is_available():
        raise RuntimeError("qvg's pipeline caches need a CUDA device (torch.cuda.is_available() is False)")
    d = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {d}")
    if d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def check_tensor(x, name, device=None):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} is on {x.device}, the cache on {device}")
    if x.is_complex() or not x.is_floating_point():
        raise ValueError(f"{name} must be a real floating-point tensor, got {x.dtype}")


def check_bhtd(x, name, heads, dim, device=None):
    """x: [batch, heads, tokens, dim]; returns (batch, tokens)."""
    check_tensor(x, name, device)
    if x.dim() != 4 or x.shape[1] != heads or x.shape[3] != dim:
        raise ValueError(f"{name} must be [batch, heads={heads}, tokens, dim={dim}], got shape {list(x.shape)}")
    return x.shape[0], x.shape[2]


def check_kv(k, v, what, heads, dim, device=None):
    """k and v: [batch, heads, tokens, dim] of one shape, named `what` + "k" / "v" in errors (what: "",
    "extra ", ...); returns (batch, tokens)."""
    b, t = check_bhtd(k, what + "k", heads, dim, device)
    check_bhtd(v, what + "v", heads, dim, device)
    if v.shape != k.shape:
        raise ValueError(f"{what}k and v must have one shape, got {list(k.shape)} and {list(v.shape)}")
    return b, t


def check_extra(extra, heads, dim, device):
    """A read's extra=(k, v): the pair, checked by check_kv; returns (k, v, batch, tokens)."""
    if not isinstance(extra, (tuple, list)) or len(extra) != 2:
        raise TypeError("extra must be a pair (k, v) of tensors")
    ek, ev = extra
    b, t = check_kv(ek, ev, "extra ", heads, dim, device)
    return ek, ev, b, t


class Codecs:
    """The K and V DeviceCodecs of a cache. A codec's group_quantized (decode_rows reads its encodings)
    and clustered (its encodes warm-start) flags come from the method table."""

    def __init__(self, key, value, device):
        with torch.cuda.device(device):
            self.k = DeviceCodec(key)
            self.v = DeviceCodec(value)

    def encode(self, codec, x, role, stream, warm_start=None):
        """x: [rows, tokens, dim] (any float dtype, any strides); the encoded tensor."""
        x = x.contiguous()
        if not codec.clustered or warm_start is None or warm_start.shape != tuple(x.shape):
            warm_start = None
        return codec.encode(x, role=role, stream=stream, warm_start=warm_start)

    def decode_rows(self, codec, enc, out, out_offset, begin, count, stream, scratch):
        """Rows [begin, begin + count) of enc into rows [out_offset, ...) of out ([rows, capacity, dim],
        contiguous). scratch(shape, dtype) gives a reused tensor for methods without a ranged decode."""
        if codec.group_quantized:
            codec.decode_rows(enc, out, out_offset=out_offset, begin=begin, count=count, stream=stream)
            return
        whole = scratch(enc.shape, out.dtype)
        codec.decode(enc, out=whole, stream=stream)
        out[:, out_offset:out_offset + count].copy_(whole[:, begin:begin + count])


class Buffers:
    """Output buffers reused from read to read: per (name, dtype) a tensor grown to the largest shape
    asked for (rows rounded up to 64 and grown by 25 %)."""

    def __init__(self, device):
        self.device = device
        self._t = {}

    def get(self, name, lead, rows, tail, dtype):
        """A tensor [*lead, capacity >= rows, *tail]; capacity is its dim len(lead)."""
        key = (name, dtype, tuple(lead), tuple(tail))
        t = self._t.get(key)
        r = len(lead)
        if t is None or t.shape[r] < rows:
            cap = max(rows, int(1.25 * t.shape[r]) if t is not None else rows)
            cap = (cap + 63) // 64 * 64
            t = torch.empty((*lead, cap, *tail), dtype=dtype, device=self.device)
            self._t[key] = t
        return t

    def scratch(self, shape, dtype):
        key = ("scratch", dtype)
        t = self._t.get(key)
        n = 1
        for s in shape:
            n *= s
        if t is None or t.numel() < n:
            t = torch.empty(n, dtype=dtype, device=self.device)
            self._t[key] = t
        return t[:n].view(*shape)

    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in self._t.values())
