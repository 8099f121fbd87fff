"""qvg.budget: the codec specs of a cache at a budget of bits per value (no PyTorch needed).

qvg.torch.KVCache(bits=...) and SelfForcingKVCache(bits=...) choose their key and value specs here:
each the configuration of its family with the lowest expected error within the budget on the cache's
spans (qvg.choose; docs/PYTHON.md, "Budgets").
"""
from ._qvg import choose

__all__ = ["cache_specs"]


def cache_specs(key, value, bits, *, chunk_tokens, quant_factor, dim):
    """(key_spec, value_spec) for spans of chunk_tokens * quant_factor tokens of head dim `dim`: key and
    value as given when bits is None, else each chosen for the budget by qvg.choose (canonical specs).
    Raises ValueError when chunk_tokens is not > 0 (the span length is unknown) or a family cannot reach
    the budget."""
    if bits is None:
        return key, value
    if chunk_tokens <= 0:
        raise ValueError("bits= needs chunk_tokens > 0: the budget is chosen for spans of chunk_tokens * "
                         "quant_factor tokens")
    tokens = chunk_tokens * quant_factor
    out = []
    for name, spec in (("key", key), ("value", value)):
        c = choose(spec, bits, tokens=tokens, dim=dim)
        if not c["reachable"]:
            raise ValueError(f"{name}={spec!r} cannot reach {bits} bits per value on spans of {tokens} tokens: "
                             f"its family's cheapest configuration, {c['description']}, stores {c['bits']:.3f}")
        out.append(c["spec"])
    return tuple(out)
