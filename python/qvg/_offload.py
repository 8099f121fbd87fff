"""Offload for the pipeline adapters: bytes kept in pinned host memory and copied back to the GPU when
read, through two staging buffers on a side stream, the next entry's copy issued when an entry is read
(docs/INTEGRATIONS.md, "LongCat-Video", compressed offload). Imports torch.

    store = HostStore()                                  # one per segment of the pipeline
    store.put(key, [k_bytes, v_bytes], meta)             # uint8 CUDA tensors -> pinned host (current stream)
    with staging.staged(store, key) as (k_view, v_view): # uint8 CUDA views, ready for the current stream
        ...                                              # queue every read of the views inside the block
    # the staging buffer is written again only after the reads queued inside the block

One stream (the caller's current stream) writes the stores and reads the staged views; the copies to
the GPU run on the Staging's own stream, ordered against it by events.
"""
import contextlib
import itertools

import torch

ALIGN = 512  # bytes: each entry and each part of an entry starts at a multiple of this
SLAB = 1 << 26  # bytes: pinned memory is taken in slabs of up to 64 MiB

_tokens = itertools.count()  # names of HostStores, for the staging buffers' tags (no reference kept)


def _round_up(n, a):
    return (n + a - 1) // a * a


def _pow2_at_least(n):
    return 1 << max(0, (n - 1).bit_length())


def pinned_bytes(n):
    """n bytes of pinned (page-locked) host memory, uint8 (what PyTorch's pinned allocator gives)."""
    return torch.empty(n, dtype=torch.uint8, pin_memory=True)


class PinnedArena:
    """Pinned host memory as one range of bytes [0, size) laid over slabs; a byte range may span slabs
    (pieces() splits it). PyTorch's pinned allocator rounds every request up to a power of two, so the
    slabs are powers of two: SLAB bytes, smaller while the arena is small (each slab at least the size
    held so far). What it pins is what `pinned` counts; at most one slab is partly unused."""

    def __init__(self, slab_bytes=SLAB):
        self.slab_bytes = slab_bytes
        self._slabs = []
        self.size = 0  # bytes handed out (alloc)

    @property
    def pinned(self):
        """Bytes of pinned memory held (every slab)."""
        return sum(s.numel() for s in self._slabs)

    def alloc(self, n):
        """Reserves n bytes at the end of the range; returns their first byte (a multiple of ALIGN)."""
        start = _round_up(self.size, ALIGN)
        while self.pinned < start + n:
            size = min(self.slab_bytes, _pow2_at_least(max(start + n - self.pinned, self.pinned)))
            try:
                self._slabs.append(pinned_bytes(size))
            except RuntimeError as e:
                raise MemoryError(f"offload: pinning {size} more bytes of host memory failed with {self.pinned} "
                                  f"bytes pinned by this store ({e}). Pinned memory is page-locked RAM: free host "
                                  "memory (or raise the container's limit), or keep the cache on the GPU "
                                  "(offload=False)") from e
        self.size = start + n
        return start

    def pieces(self, start, n):
        """Bytes [start, start + n) as [(offset from start, pinned uint8 view)], one per slab they touch."""
        out, pos, base = [], start, 0
        for slab in self._slabs:
            end = base + slab.numel()
            if pos < end and pos < start + n:
                stop = min(end, start + n)
                out.append((pos - start, slab[pos - base:stop - base]))
                pos = stop
            base = end
        return out


class HostStore:
    """Entries of bytes in pinned host memory, one per key, written from uint8 CUDA tensors; `meta` is
    kept beside each entry for whoever reads it back (e.g. the spec, role and shape unpack needs)."""

    def __init__(self, slab_bytes=SLAB):
        self.token = next(_tokens)
        self._arena = PinnedArena(slab_bytes)
        self._entries = {}  # key -> (first byte, bytes, [(offset, bytes)] of its parts, written event, meta)
        self._order = []  # keys in increasing order: what after() walks

    def put(self, key, parts, meta=None):
        """Copies `parts` (contiguous uint8 CUDA tensors on one device) one after another into a new entry
        `key` (each part at a multiple of ALIGN), on that device's current stream; the parts may be freed
        on return."""
        if key in self._entries:
            raise ValueError(f"offload: entry {key!r} is stored already")
        layout, end = [], 0
        for p in parts:
            layout.append((end, p.numel()))
            end = _round_up(end + p.numel(), ALIGN)
        n = layout[-1][0] + layout[-1][1]
        start = self._arena.alloc(n)
        for p, (o, size) in zip(parts, layout):
            for off, view in self._arena.pieces(start + o, size):
                view.copy_(p[off:off + view.numel()], non_blocking=True)
        written = torch.cuda.Event()
        written.record(torch.cuda.current_stream(parts[0].device))
        self._entries[key] = (start, n, layout, written, meta)
        self._order = sorted(self._entries)

    def __contains__(self, key):
        return key in self._entries

    def pieces(self, key):
        """The entry's bytes as [(offset in the entry, pinned uint8 view)], one per slab they touch."""
        start, n = self._entries[key][:2]
        return self._arena.pieces(start, n)

    def layout(self, key):
        """[(offset in the entry, bytes)] of the entry's parts."""
        return self._entries[key][2]

    def written(self, key):
        """The event after which the entry's bytes are in host memory."""
        return self._entries[key][3]

    def meta(self, key):
        return self._entries[key][4]

    def entry_bytes(self, key):
        return self._entries[key][1]

    def after(self, key):
        """The entry read after `key` in a pass over the store: the next larger key, after the largest the
        smallest (a denoising step ends with the last block; the next starts with the first)."""
        i = self._order.index(key) + 1
        return self._order[i % len(self._order)]

    @property
    def nbytes(self):
        """Bytes of the entries (their parts and the padding between them)."""
        return self._arena.size

    @property
    def pinned(self):
        """Bytes of pinned memory held (PinnedArena.pinned)."""
        return self._arena.pinned


class _Slot:
    """A staging buffer: the entry it holds (or is receiving), and the events that order it."""

    def __init__(self):
        self.buf = None  # uint8 CUDA tensor
        self.holds = None  # (store token, key)
        self.ready = torch.cuda.Event()  # recorded on the copy stream after the copy into buf
        self.free = None  # recorded on the reading stream after the reads of buf (an Event once read)


class Staging:
    """Two device buffers that receive HostStore entries on a side stream (ping-pong): reading an entry
    (staged) starts the copy of the store's next entry into the other buffer, so that it crosses PCIe
    while the first one is used. A read of an entry that is not staged copies it then (the current
    stream waits for it); any order of reads is correct, the order of after() is the fast one."""

    def __init__(self, device):
        self.device = device
        self._stream = torch.cuda.Stream(device)
        self._slots = [_Slot(), _Slot()]
        self._last = 1  # the slot read last; a read of an entry not staged takes the other one
        self.copied = 0  # bytes copied host -> device

    def _holding(self, store, key):
        for j, s in enumerate(self._slots):
            if s.holds == (store.token, key):
                return j
        return None

    def _copy(self, store, key, j):
        """Queues the copy of `store`'s entry `key` into slot j on the side stream, after the entry was
        written and after the slot's previous reads."""
        slot = self._slots[j]
        n = store.entry_bytes(key)
        if slot.buf is None or slot.buf.numel() < n:
            slot.buf = torch.empty(n, dtype=torch.uint8, device=self.device)  # on the current stream:
            slot.buf.record_stream(self._stream)  # freed only after the side stream's use,
            self._stream.wait_stream(torch.cuda.current_stream(self.device))  # written after its last one
        self._stream.wait_event(store.written(key))
        if slot.free is not None:
            self._stream.wait_event(slot.free)
        with torch.cuda.stream(self._stream):
            for off, view in store.pieces(key):
                slot.buf[off:off + view.numel()].copy_(view, non_blocking=True)
        slot.ready.record(self._stream)
        slot.holds = (store.token, key)
        self.copied += n

    @contextlib.contextmanager
    def staged(self, store, key):
        """Yields `store`'s entry `key` as its parts, uint8 CUDA views of a staging buffer that the current
        stream may read (it waits for the copy). Queue every read of them inside the with-block: the
        buffer is written again only after those reads. Starts the copy of store.after(key) into the
        other buffer. Not re-entrant (one entry staged at a time)."""
        j = self._holding(store, key)
        if j is None:
            j = 1 - self._last
            self._copy(store, key, j)
        nxt = store.after(key)
        if self._holding(store, nxt) is None:
            self._copy(store, nxt, 1 - j)
        slot = self._slots[j]
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(slot.ready)
        try:
            yield [slot.buf[o:o + n] for o, n in store.layout(key)]
        finally:
            if slot.free is None:
                slot.free = torch.cuda.Event()
            slot.free.record(stream)
            self._last = j

    @property
    def nbytes(self):
        """Device bytes of the two staging buffers."""
        return sum(s.buf.numel() for s in self._slots if s.buf is not None)
