"""The stream protocol of qvg._offload (HostStore, Staging) against a simulated GPU, on any machine.

qvg/_offload.py is loaded with a stand-in for torch (FakeTorch below): 1-D byte tensors, and CUDA
streams whose copies run later, in a random order that keeps each stream's order and its event waits
(as a GPU may run them). Reads of staged entries, in order and out of order over several stores
whose entries differ in size, must see the bytes that were stored, under many interleavings; the
same check with any one of Staging's waits removed fails (a race the simulation finds).
The GPU tests of the cache that uses it are in test_integrations.py (LongCatOffload).
"""
import contextlib
import importlib.util
import os
import random
import sys
import types
import unittest

OFFLOAD_PY = os.path.join(os.path.dirname(__file__), "..", "qvg", "_offload.py")


class FakeTensor:
    """A 1-D byte tensor (a view of a bytearray); copy_ queues the copy on the current fake stream."""

    def __init__(self, data, off, n, device):
        self.data, self.off, self.n, self.device = data, off, n, device

    def numel(self):
        return self.n

    def __getitem__(self, sl):
        lo, hi, _ = sl.indices(self.n)
        return FakeTensor(self.data, self.off + lo, max(0, hi - lo), self.device)

    def bytes(self):
        return bytes(self.data[self.off:self.off + self.n])

    def copy_(self, src, non_blocking=False):
        assert src.n == self.n
        dst = self

        def op():
            dst.data[dst.off:dst.off + dst.n] = src.data[src.off:src.off + src.n]
        FakeTorch.cuda.current_stream().queue.append(("op", op))
        return self

    def record_stream(self, stream):
        pass


class FakeStream:
    def __init__(self, device=None):
        self.queue = []  # ("op", fn) | ("record", event, version) | ("wait", event, version)
        FakeTorch.streams.append(self)

    def wait_event(self, event):
        if event.version:  # CUDA: a wait on an event never recorded is a no-op
            self.queue.append(("wait", event, event.version))

    def wait_stream(self, other):
        event = FakeEvent()
        event.record(other)
        self.wait_event(event)


class FakeEvent:
    def __init__(self):
        self.version = 0  # records queued
        self.done = 0  # the last record run

    def record(self, stream=None):
        self.version += 1
        (stream or FakeTorch.cuda.current_stream()).queue.append(("record", self, self.version))


class FakeTorch(types.ModuleType):
    uint8 = "uint8"
    streams = []

    class cuda:
        Stream, Event = FakeStream, FakeEvent
        current = None

        @staticmethod
        def current_stream(device=None):
            return FakeTorch.cuda.current

        @staticmethod
        @contextlib.contextmanager
        def stream(s):
            old, FakeTorch.cuda.current = FakeTorch.cuda.current, s
            try:
                yield
            finally:
                FakeTorch.cuda.current = old

    @staticmethod
    def empty(n, dtype=None, device=None, pin_memory=False):
        return FakeTensor(bytearray(b"\xee" * n), 0, n, "cpu" if device is None else device)

    @staticmethod
    def reset():
        FakeTorch.streams = []
        FakeTorch.cuda.current = FakeStream()

    @staticmethod
    def run(seed):
        """Runs every queued operation: each step a random stream whose next operation may run."""
        rng = random.Random(seed)
        while True:
            ready = [s for s in FakeTorch.streams if s.queue and not (
                s.queue[0][0] == "wait" and s.queue[0][1].done < s.queue[0][2])]
            if not ready:
                assert not any(s.queue for s in FakeTorch.streams), "the streams wait on each other"
                return
            op = rng.choice(ready).queue.pop(0)
            if op[0] == "op":
                op[1]()
            elif op[0] == "record":
                op[1].done = max(op[1].done, op[2])


def load_offload(source=None):
    """qvg/_offload.py (or `source`, its text) as a module bound to FakeTorch."""
    fake = FakeTorch("torch")
    saved = sys.modules.get("torch")
    sys.modules["torch"] = fake
    try:
        if source is None:
            spec = importlib.util.spec_from_file_location("offload_on_fake_torch", OFFLOAD_PY)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = types.ModuleType("offload_on_fake_torch")
            exec(compile(source, OFFLOAD_PY, "exec"), module.__dict__)
    finally:
        if saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = saved
    return module


def pattern(key, seg, part, n):
    return bytes([(key * 7 + part * 3 + seg * 11) % 251 + 1]) * n


def scenario(off, seed):
    """Three stores (segments) of entries of random sizes, read through one Staging in order, then at
    random; returns [(bytes a read saw, bytes stored, where)] once the simulated GPU has run."""
    rng = random.Random(seed)
    FakeTorch.reset()
    staging = off.Staging("cuda")
    checks = []
    for seg in range(3):
        store = off.HostStore(slab_bytes=rng.choice([1 << 10, 1 << 12, 1 << 16]))
        keys = rng.sample(range(8), rng.randint(1, 6))
        sizes = {k: [rng.randint(1, 900), rng.randint(1, 900)] for k in keys}
        for k in keys:
            parts = []
            for j, n in enumerate(sizes[k]):
                t = FakeTorch.empty(n, device="cuda")
                t.data[:] = pattern(k, seg, j, n)
                parts.append(t)
            store.put(k, parts)
            for p in parts:  # their memory is reused by later work on the stream, as PyTorch's allocator does
                p.copy_(FakeTorch.empty(p.n, device="cuda"))
        for k in sorted(keys) * 2 + [rng.choice(keys) for _ in range(10)]:
            with staging.staged(store, k) as views:
                for j, v in enumerate(views):
                    seen = []
                    FakeTorch.cuda.current_stream().queue.append(("op", lambda v=v, seen=seen: seen.append(v.bytes())))
                    checks.append((seen, pattern(k, seg, j, sizes[k][j]), (seed, seg, k, j)))
            for _ in range(rng.randint(0, 3)):  # the block's other work
                FakeTorch.cuda.current_stream().queue.append(("op", lambda: None))
    FakeTorch.run(seed)
    return [(seen[0], want, where) for seen, want, where in checks]


class StagingProtocol(unittest.TestCase):
    def test_reads_see_the_stored_bytes_under_any_interleaving(self):
        off = load_offload()
        for seed in range(200):
            for seen, want, where in scenario(off, seed):
                self.assertEqual(seen, want, where)

    def test_each_wait_is_needed(self):
        with open(OFFLOAD_PY) as f:
            source = f.read()
        for wait in ("stream.wait_event(slot.ready)", "self._stream.wait_event(slot.free)",
                     "self._stream.wait_event(store.written(key))"):
            self.assertIn(wait, source)
            off = load_offload(source.replace(wait, "pass"))
            bad = [where for seed in range(200) for seen, want, where in scenario(off, seed) if seen != want]
            self.assertTrue(bad, f"no read went wrong without {wait}")


if __name__ == "__main__":
    unittest.main()
