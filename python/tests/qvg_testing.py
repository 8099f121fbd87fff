"""Shared by the Python module's tests: the CLI that serves as their reference, test data, specs,
random K/V, float bits, BF16 rounding, and whether CUDA (and PyTorch with CUDA) is usable."""
import os

import numpy as np

import qvg

CLI = os.environ.get("QVG_CLI", "")
TEST_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")
SPECS = ["bf16", "rtn", "rtn-int4", "kivi", "quarot", "qvg", "qvg-pro:iters=3", "qvg-int4:levels=midrise"]
CUDA_OK, CUDA_WHY = qvg.cuda_available()


def random_kv(heads=2, tokens=640, dim=64, seed=7):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((heads, tokens, dim)).astype(np.float32)


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def bf16_round(x):
    """float32 -> the nearest BF16 value (ties to even), as float32; finite inputs."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


try:
    import torch
    TORCH_CUDA = CUDA_OK and torch.cuda.is_available()
except ImportError:
    torch, TORCH_CUDA = None, False
