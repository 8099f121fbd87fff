"""qvg: KV-cache compression for autoregressive video diffusion (Quant VideoGen).

The codecs, the streaming caches and the device codec come from the extension
qvg._qvg (C++, include/qvg/); qvg.torch is the PyTorch cache (import it
explicitly: it imports torch). Reference: docs/PYTHON.md.
"""
from ._qvg import *  # noqa: F401,F403
from ._qvg import __doc__ as _ext_doc, __version__  # noqa: F401

__doc__ = _ext_doc
