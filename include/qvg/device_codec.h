// Encoded tensors that stay in device memory, and a codec that works on the
// caller's CUDA stream: what a model's generation loop needs to encode a span
// and decode its K/V at every step without host round trips. (qvg/cuda.h's
// functions take and return host EncodedTensors and synchronize.)
//
// Streams are passed as void* (a cudaStream_t; null: the legacy default
// stream), so this header needs no CUDA headers. Every call queues its work
// on the stream and returns; none synchronizes the device unless it says so.
// In builds without CUDA the functions throw qvg::Error.
#pragma once

#include <memory>
#include <vector>

#include "qvg/codec.h"
#include "qvg/cuda.h"

namespace qvg {

/// An encoded K or V tensor whose parts live in the memory of a CUDA device
/// (the format of docs/FORMAT.md, part by part). Immutable; copies share the
/// parts. Its memory comes from the device's stream-ordered pool on the
/// stream that made it and returns there when the last copy goes: keep that
/// stream alive as long as the tensor, and order work on other streams after
/// it (as for memory from PyTorch's caching allocator).
class DeviceEncodedTensor {
 public:
  DeviceEncodedTensor();
  bool empty() const { return impl_ == nullptr; }
  const CodecConfig& config() const;
  TensorRole role() const;
  int64_t heads() const;
  int64_t tokens() const;
  int64_t dim() const;
  /// The device that holds the parts.
  int device() const;
  /// Bytes of every part, as EncodedTensor::bytes() of its host form.
  PartBytes bytes() const;
  double bits_per_value() const;
  /// Whether this is a warm_state(): centroids only.
  bool centroids_only() const;

  /// A tensor holding a copy of only this one's centroids (qvg with
  /// smoothing stages): what DeviceCodec::encode reads from a warm start,
  /// without keeping the other parts alive. It cannot be decoded or copied
  /// to the host; bytes() counts its centroids only. Stream-ordered.
  DeviceEncodedTensor warm_state(void* stream) const;

  /// The host form: every part copied back. Synchronizes `stream` (the
  /// caller asks for a host result).
  EncodedTensor to_host(void* stream = nullptr) const;
  /// e's parts on the current device, checked first as the decoders check
  /// them (qvg::Error naming the problem). Stream-ordered; e may be
  /// destroyed on return.
  static DeviceEncodedTensor from_host(const EncodedTensor& e, void* stream = nullptr);

  /// Every part into one buffer of device memory, `out` (bytes().total()
  /// bytes on this tensor's device), one after the other in the order of
  /// PartBytes' fields: with config(), role() and the shape, what a peer
  /// needs to rebuild the tensor (unpack), as one message between devices
  /// (NCCL send / recv). qvg (either residual code) and rtn.
  /// Stream-ordered.
  void pack(void* out, void* stream) const;
  /// pack()'s inverse: a tensor of this header whose parts are copied from
  /// `packed` (device memory on the current device, expected_part_bytes(
  /// config, role, heads, tokens, dim).total() bytes). The bytes are
  /// trusted as pack() wrote them (from_host checks ids and span scales; a
  /// device buffer is not read back to check them). Stream-ordered.
  static DeviceEncodedTensor unpack(const CodecConfig& config, TensorRole role, int64_t heads, int64_t tokens,
                                    int64_t dim, const void* packed, void* stream);

  struct Impl;
  explicit DeviceEncodedTensor(std::shared_ptr<const Impl> impl);
  const Impl& impl() const;

 private:
  std::shared_ptr<const Impl> impl_;
};

/// A codec on the current CUDA device whose encodings stay there. Every
/// method decodes on the device; qvg (code=int and code=cq) and rtn also
/// encode there.
class DeviceCodec {
 public:
  /// Throws qvg::Error when no device is usable or the config is invalid.
  explicit DeviceCodec(const CodecConfig& config);
  ~DeviceCodec();
  DeviceCodec(DeviceCodec&&) noexcept;
  DeviceCodec& operator=(DeviceCodec&&) noexcept;
  const CodecConfig& config() const;

  /// Encode x ([heads, tokens, dim] of `type`, contiguous, 16-byte aligned,
  /// on the current device) on `stream`.
  /// - qvg, rtn: on the device. Each head's k-means stops by the CPU
  ///   reference's rule (relative drop of the error <= tol, or max_iter),
  ///   decided on the device after every assignment (no host round trip;
  ///   all max_iter iterations are launched, converged heads skip them): the
  ///   CPU reference gives the same bytes where no assignment has near-ties
  ///   and no head's drop lies within rounding of tol (the GPU sums the
  ///   error in another order). Starts: random rows and a warm start
  ///   (warm_start: a previous encoding of this config with the same heads,
  ///   dim and centroids) run on the device; the subsample of a d2-rounds
  ///   (the default) or k-means++ start is drawn on the host once per shape
  ///   and stage (it depends on tokens, C and the
  ///   seed only) and reused, so only the first encode of a shape waits for
  ///   the host. Values are not checked: a non-finite input or a residual
  ///   that overflows float gives non-finite parts (docs/FORMAT.md); check
  ///   with to_host().
  ///   code=cq's codebooks: k-means from random sample rows in one block
  ///   per head and channel group, stopping by the same rule (exact sums:
  ///   the CPU reference's bytes).
  /// - kivi, quarot, fp8, bf16: x is copied to the host, the CPU reference
  ///   encodes it and the parts are uploaded (synchronizes `stream`).
  /// Scratch memory is kept for the next encode; one encode at a time per
  /// codec (calls from several threads are serialized).
  DeviceEncodedTensor encode(const void* x, DeviceElement type, int64_t heads, int64_t tokens, int64_t dim,
                             TensorRole role, void* stream, const DeviceEncodedTensor* warm_start = nullptr) const;

  /// Encode `count` tensors of one shape: x holds them one after another
  /// ([count][heads, tokens, dim] of `type`, contiguous, 16-byte aligned).
  /// The same bytes as encode() of each one (tensor i's head h draws its
  /// k-means start with head h's seed), for qvg and rtn with one launch
  /// sequence per k-means step over the tensors of a group (groups of
  /// whole tensors, at most group_rows rows of heads x tokens together, at
  /// least one tensor: the scratch memory grows with the group); other
  /// methods encode one by one. warm_starts: null, or `count` pointers, each
  /// null, empty or a warm start as encode() takes it; with smoothing
  /// stages either every tensor has one or none (qvg::Error otherwise).
  /// Each result owns its parts (copied out of the group's).
  std::vector<DeviceEncodedTensor> encode_batch(const void* x, DeviceElement type, int64_t count, int64_t heads,
                                                int64_t tokens, int64_t dim, TensorRole role, void* stream,
                                                const DeviceEncodedTensor* const* warm_starts = nullptr,
                                                int64_t group_rows = kBatchRows) const;
  static constexpr int64_t kBatchRows = int64_t{1} << 21;

  /// Decode e into out ([heads, tokens, dim] of `type` on e's device,
  /// 16-byte aligned): the float decode (bit-identical to the CPU decode's),
  /// rounded to nearest even for bf16 and f16. Kernels queued on `stream`;
  /// no allocation, no synchronization. e's config must be this codec's
  /// method (qvg::Error otherwise).
  void decode(const DeviceEncodedTensor& e, void* out, DeviceElement type, void* stream) const;

  /// qvg and rtn: decode tokens [begin, begin + count) of e (count < 0: to
  /// the end) into token rows [out_offset, out_offset + count) of out, which
  /// holds out_tokens tokens a head ([heads, out_tokens, dim]): a span, or
  /// the live part of one, straight into a layer's K/V buffer.
  void decode_rows(const DeviceEncodedTensor& e, void* out, DeviceElement type, int64_t out_tokens,
                   int64_t out_offset, void* stream, int64_t begin = 0, int64_t count = -1) const;

  /// decode_rows into a token-major destination: out holds out_tokens rows
  /// of [heads, dim] ([out_tokens, heads, dim], flash-attention's layout);
  /// token begin + i of head h goes to row out_offset + i. The same values
  /// as decode_rows (the kernels differ only in where they store). qvg and
  /// rtn.
  void decode_rows_token_major(const DeviceEncodedTensor& e, void* out, DeviceElement type, int64_t out_tokens,
                               int64_t out_offset, void* stream, int64_t begin = 0, int64_t count = -1) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qvg
