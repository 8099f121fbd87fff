"""Index arithmetic of the pipeline adapters (qvg.longcat, qvg.hyworldplay, qvg.lingbot), without torch.

These functions decide which rows a read copies from where; the adapters only move the bytes. They are
here, apart from the adapters, so that they can be tested where PyTorch is not installed.
"""

__all__ = ["cache_batch_mode", "check_frames", "frame_runs", "attention_window", "check_chunk_tokens"]


def cache_batch_mode(cache_batch, query_batch):
    """How a cache of `cache_batch` samples serves a query batch of `query_batch` (LongCat's rule: a
    cache of batch 1 is shared by every sample, e.g. classifier-free guidance's conditional and
    unconditional halves; otherwise the cache has one sample per query sample).
    Returns "shared" or "per_sample"; ValueError for any other pair."""
    for name, b in (("cache batch", cache_batch), ("query batch", query_batch)):
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"{name} must be a positive int, got {b!r}")
    if cache_batch == 1:
        return "shared"
    if cache_batch == query_batch:
        return "per_sample"
    raise ValueError(f"the cache holds {cache_batch} samples and the query batch has {query_batch}: a cache must "
                     "hold 1 sample (shared by the batch) or one per query sample")


def check_frames(frames, held):
    """frames: an iterable of frame indices (ints), each in [0, held), no index twice.
    Returns them as a list in the order given; ValueError naming the first bad entry."""
    out, seen = [], set()
    for f in frames:
        if not isinstance(f, int) or isinstance(f, bool):
            try:  # NumPy and torch integer scalars
                import operator
                f = operator.index(f)
            except TypeError:
                raise ValueError(f"frame indices must be ints, got {f!r}") from None
        if f < 0 or f >= held:
            raise ValueError(f"frame {f} is not in the cache (it holds frames 0 .. {held - 1})" if held
                             else f"frame {f} is not in the cache (it holds no frames)")
        if f in seen:
            raise ValueError(f"frame {f} is selected twice")
        seen.add(f)
        out.append(f)
    return out


def frame_runs(frames, spans):
    """Plans a read of `frames` (checked indices, in output order) out of `spans`: a list of
    (first_frame, frame_count) in frame order, covering frames 0 .. held-1 without gaps.
    Returns [(span_index, first_frame_in_span, frame_count, out_frame)]: copy frame_count frames
    starting at frame first_frame_in_span of span span_index to output frames out_frame ...
    Consecutive selected frames of one span form one run (one decode)."""
    starts = [s for s, _ in spans]
    runs = []
    for out, f in enumerate(frames):
        # the span holding frame f: the last span starting at or before it
        lo, hi = 0, len(starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if starts[mid] <= f:
                lo = mid
            else:
                hi = mid
        s, n = spans[lo]
        if not s <= f < s + n:
            raise ValueError(f"frame {f} is in no span (spans {spans})")
        if runs:
            si, b, c, o = runs[-1]
            if si == lo and b + c == f - s and o + c == out:
                runs[-1] = (si, b, c + 1, o)
                continue
        runs.append((lo, f - s, 1, out))
    return runs


def attention_window(local_end, max_attention_size):
    """The rows [start, local_end) a Self-Forcing-style attention reads from its buffer: the last
    max_attention_size rows (None: all of them), as CausalWanSelfAttention slices them."""
    if max_attention_size is None:
        return 0, local_end
    if not isinstance(max_attention_size, int) or isinstance(max_attention_size, bool) or max_attention_size < 1:
        raise ValueError(f"max_attention_size must be a positive int or None, got {max_attention_size!r}")
    return max(0, local_end - max_attention_size), local_end


def check_chunk_tokens(tokens, frame_tokens, what="k"):
    """A chunk of `tokens` rows must be whole frames of frame_tokens rows; returns the frame count."""
    if tokens <= 0 or tokens % frame_tokens:
        raise ValueError(f"{what} has {tokens} tokens: not a positive whole number of frames of {frame_tokens} tokens")
    return tokens // frame_tokens
