"""qvg.lingbot: a compressed drop-in for LingBot-World's causal KV cache (docs/INTEGRATIONS.md, "LingBot-World").

LingBot-World's causal blocks (Wan 2.x A14B: 40 blocks, 40 heads of 128) keep Self-Forcing's per-block
dict ("k", "v", "global_end_index", "local_end_index"; keys after RoPE; a sink of sink_size frames and
a rolling buffer of local_attn_size frames, sink included) and read the buffer's last
max_attention_size rows. LingBotWorldKVCache is qvg.torch.SelfForcingKVCache with LingBot-World's
defaults, its max_attention_size and keep_recent (the newest finished chunks held in BF16):

    import qvg.lingbot
    kv_cache = qvg.lingbot.LingBotWorldKVCache(frame_seqlen=1560, local_attn_size=68, sink_size=6,
                                               key="qvg", value="qvg", quant_factor=1, keep_recent=1)
    # in CausalWanSelfAttention.forward, in place of the write / roll / read of kv_cache[i]:
    k_cache, v_cache = kv_cache[i].update(roped_key, v, current_start)   # [1, n, heads, 128]

With Ulysses sequence parallelism each rank holds heads / ulysses_size heads: heads=that count and
first_head=rank x that count (qvg.distributed.head_range), so each rank's spans equal those heads of a
one-GPU cache.
"""
from .torch import SelfForcingKVCache

__all__ = ["LingBotWorldKVCache"]


class LingBotWorldKVCache(SelfForcingKVCache):
    """SelfForcingKVCache (qvg.torch) with LingBot-World's shapes as defaults: 40 blocks, 40 heads, 128 dims,
    chunks of 3 latent frames of 1,560 tokens (480 x 832). max_attention_size: the rows update() returns
    (LingBot-World's argument of that name; None: the whole buffer, its default)."""

    def __init__(self, num_blocks=40, heads=40, dim=128, *, frame_seqlen=1560, frames_per_chunk=3,
                 local_attn_size=-1, sink_size=0, max_attention_size=None, key="qvg", value="qvg", quant_factor=8,
                 keep_recent=0, device=None, first_head=0, overlap_encode=False, batch_encodes=False,
                 zero_copy_reads=False):
        super().__init__(num_blocks, heads, dim, frame_seqlen=frame_seqlen, frames_per_chunk=frames_per_chunk,
                         local_attn_size=local_attn_size, sink_size=sink_size, key=key, value=value,
                         quant_factor=quant_factor, device=device, overlap_encode=overlap_encode,
                         first_head=first_head, batch_encodes=batch_encodes, keep_recent=keep_recent,
                         max_attention_size=max_attention_size, zero_copy_reads=zero_copy_reads)
