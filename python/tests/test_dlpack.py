"""DLPack producers other than NumPy (PyTorch, CuPy and JAX hand theirs over so): any array behind __dlpack__ / __dlpack_device__, capsules, strides, lifetimes (label cpu)."""
import ctypes
import unittest

import numpy as np

import qvg
from qvg_testing import CUDA_OK, bits, random_kv

class Producer:
    """A DLPack producer that is not a NumPy array, as PyTorch, CuPy and JAX
    hand theirs over: any array behind __dlpack__ / __dlpack_device__."""

    def __init__(self, a, device=None):
        self.a, self.device = a, device

    def __dlpack__(self, stream=None):
        assert stream is None  # host producers get no stream
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.device or self.a.__dlpack_device__()


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]
_keep = {}  # what a hand-made capsule's memory needs until its deleter runs


def dlpack_capsule(buf, byte_offset, shape, on_delete):
    """A legacy DLPack capsule of float32 `buf` (a CPU tensor of `shape`, no strides)."""
    shp = (ctypes.c_int64 * len(shape))(*shape)
    m = DLManagedTensor()
    key = id(m)

    def deleter(_):
        on_delete()
        _keep.pop(key, None)

    m.dl_tensor = DLTensor(buf.ctypes.data, 1, 0, len(shape), 2, 32, 1, shp, None, byte_offset)
    m.deleter = DELETER(deleter)
    _keep[key] = (buf, shp, m, m.deleter)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), b"dltensor", None)


class CapsuleProducer:
    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, stream=None):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)


class DLPack(unittest.TestCase):
    def test_host_tensors_encode_like_their_arrays(self):
        codec = qvg.Codec("qvg")
        x = random_kv(seed=4)
        want = codec.encode(x).parts
        self.assertEqual(codec.encode(Producer(x)).parts, want)
        big = random_kv(tokens=1280, seed=5)
        view = big[::-1, 1::2, :]  # strided tokens, an offset, heads reversed (a negative stride)
        self.assertEqual(codec.encode(Producer(view)).parts, codec.encode(np.ascontiguousarray(view)).parts)
        for dt in (np.float16, np.float64):
            y = x.astype(dt)
            self.assertEqual(codec.encode(Producer(y)).parts, codec.encode(y).parts)
        for dt in (np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64):  # as NumPy's float32 cast
            # (unsigned: |x|, since a negative value cast to uint64 is ~1.8e19, above qvg's range)
            y = ((np.abs(x) if np.dtype(dt).kind == "u" else x) * 40).astype(dt)
            self.assertEqual(codec.encode(Producer(y)).parts, codec.encode(y.astype(np.float32)).parts)
        thd = np.ascontiguousarray(x.transpose(1, 0, 2))[None]  # [1, tokens, heads, dim]
        self.assertEqual(codec.encode(Producer(thd), layout="thd").parts, want)
        y = qvg.Codec("rtn").decode(qvg.Codec("rtn").encode(x))
        self.assertEqual(qvg.compare(Producer(x), Producer(y)), qvg.compare(x, y))
        a, b = (qvg.StreamingKVCache(1, 2, 64, chunk_tokens=320) for _ in range(2))
        a.append(0, x[:, :320], x[:, 320:])
        b.append(0, Producer(x[:, :320]), Producer(np.ascontiguousarray(x[:, 320:])))
        for got, ref in zip(b.read(0), a.read(0)):
            np.testing.assert_array_equal(bits(got), bits(ref))

    def test_byte_offset_and_the_producers_deleter(self):
        # A capsule made by hand (ctypes): the data 12 bytes past the buffer's
        # start through DLTensor.byte_offset, as some producers give it. The
        # producer's deleter runs exactly once.
        x = random_kv(seed=6)
        buf = np.zeros(x.size + 3, np.float32)
        buf[3:] = x.ravel()
        deleted = []
        cap = dlpack_capsule(buf, byte_offset=12, shape=x.shape, on_delete=lambda: deleted.append(1))
        codec = qvg.Codec("qvg")
        self.assertEqual(codec.encode(CapsuleProducer(cap)).parts, codec.encode(x).parts)
        self.assertEqual(deleted, [1])

    def test_bad_tensors_and_outputs(self):
        codec = qvg.Codec("rtn")
        x = random_kv()
        with self.assertRaises(ValueError) as cm:
            codec.encode(Producer(x.astype(np.complex64)))
        self.assertIn("not a real number type", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            codec.encode(Producer(x, device=(12, 0)))
        self.assertIn("device type 12", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            codec.encode(Producer(x[0]))
        self.assertIn("shape", str(cm.exception))
        e = codec.encode(x)
        with self.assertRaises(ValueError) as cm:
            codec.decode(e, output="gpu")
        self.assertIn("output must be", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            codec.decode(e, dtype="bfloat16")
        self.assertIn("float32 only", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            codec.decode(e, output="cuda", layout="thd")
        self.assertIn("layout", str(cm.exception))
        with self.assertRaises(ValueError):
            qvg.Codec("kivi").decode(e, output="cuda")  # another method
        if not CUDA_OK:
            with self.assertRaises(ValueError) as cm:
                codec.decode(e, output="cuda")
            self.assertIn("output=\"cuda\"", str(cm.exception))
            cache = qvg.StreamingKVCache(1, 2, 64)
            cache.append(0, x, x)
            with self.assertRaises(ValueError) as cm:
                cache.read_device(0)
            self.assertIn("read_device", str(cm.exception))
        with self.assertRaises(TypeError):
            qvg.compare("a", "b")


if __name__ == "__main__":
    unittest.main()
