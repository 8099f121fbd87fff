// plan_append (span_plan.h): eviction first, then the grouping of pending
// chunks; the memory sums both caches report.
#include "cache/span_plan.h"

#include <algorithm>

namespace qvg {

AppendPlan plan_append(const SpanPolicy& p, std::span<const ChunkSlot> chunks) {
  std::vector<size_t> live_ns;  // live non-sink chunks, oldest first
  for (size_t s = 0; s < chunks.size(); ++s)
    if (chunks[s].live && chunks[s].index >= p.sink) live_ns.push_back(s);
  size_t keep_from = 0;
  if (p.window_chunks > 0 && live_ns.size() > static_cast<size_t>(p.window_chunks))
    keep_from = live_ns.size() - static_cast<size_t>(p.window_chunks);
  if (p.window_tokens > 0 && !live_ns.empty()) {
    size_t i = live_ns.size() - 1;  // the newest chunk always stays
    int64_t sum = chunks[live_ns[i]].tokens;
    while (i > 0 && sum + chunks[live_ns[i - 1]].tokens <= p.window_tokens) sum += chunks[live_ns[--i]].tokens;
    keep_from = std::max(keep_from, i);
  }
  AppendPlan plan;
  plan.evict.assign(live_ns.begin(), live_ns.begin() + static_cast<std::ptrdiff_t>(keep_from));
  std::vector<size_t> pending;
  for (size_t i = keep_from; i < live_ns.size(); ++i)
    if (!chunks[live_ns[i]].encoded) pending.push_back(live_ns[i]);
  const size_t q = static_cast<size_t>(p.quant_factor), r = static_cast<size_t>(p.keep_recent);
  for (size_t used = 0; pending.size() - used >= q + r; used += q)
    plan.groups.emplace_back(pending.begin() + static_cast<std::ptrdiff_t>(used),
                             pending.begin() + static_cast<std::ptrdiff_t>(used + q));
  return plan;
}

void add_parts(PartBytes& a, const PartBytes& b) {
  a.codes += b.codes;
  a.scales += b.scales;
  a.zero_points += b.zero_points;
  a.span_scales += b.span_scales;
  a.centroids += b.centroids;
  a.ids += b.ids;
  a.full_precision += b.full_precision;
}

void add_memory(LayerMemory& a, const LayerMemory& b) {
  add_parts(a.k.spans, b.k.spans);
  add_parts(a.v.spans, b.v.spans);
  a.k.tail += b.k.tail;
  a.v.tail += b.v.tail;
  a.positions += b.positions;
  a.warm_start += b.warm_start;
  a.tokens_live += b.tokens_live;
  a.tokens_held += b.tokens_held;
  a.tokens_encoded += b.tokens_encoded;
  a.spans += b.spans;
  a.bf16_bytes += b.bf16_bytes;
}

}  // namespace qvg
