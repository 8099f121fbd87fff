// qvg — tensor files: read K/V (and Q) from .npy / .safetensors, write reconstructions back.
//
// Two levels:
//  - RawTensor: the bytes of one tensor as stored (dtype, shape, little-endian, C order),
//    read and written by read_npy / write_npy / read_safetensors / write_safetensors.
//  - HeadTensor (float32 [heads, tokens, dim]): what the codecs take, converted from and
//    to a RawTensor by to_head_tensor / from_head_tensor, or in one call by load_kv / save_kv.
//
// Every problem with a file (missing, truncated, corrupt header, unsupported dtype, wrong
// rank, unknown tensor name, ...) throws qvg::Error whose message starts with the file path
// and names the problem. The byte formats are described in docs/FORMAT.md, "Tensor files".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qvg/common.h"
#include "qvg/tensor.h"

namespace qvg {

/// Element types a tensor file may hold. All are little-endian in the files.
enum class DType : uint8_t {
  f32,   ///< IEEE binary32             (npy '<f4', safetensors F32)
  f16,   ///< IEEE binary16             (npy '<f2', safetensors F16)
  bf16,  ///< bfloat16                  (npy '<V2' as ml_dtypes writes it, safetensors BF16)
  u8,    ///< unsigned 8-bit integer    (npy '|u1', safetensors U8)
  i32,   ///< signed 32-bit integer     (npy '<i4', safetensors I32)
  i64,   ///< signed 64-bit integer     (npy '<i8', safetensors I64)
};

/// Bytes per element: 4, 2, 2, 1, 4, 8.
size_t dtype_size(DType t);
/// Short name: "f32", "f16", "bf16", "u8", "i32", "i64".
const char* dtype_name(DType t);
/// A shape as the I/O messages write it: "[6144, 2, 128]" ("[]" for a scalar).
std::string shape_string(const std::vector<int64_t>& shape);
/// True for f32, f16, bf16.
bool dtype_is_float(DType t);
/// Parses a dtype name: the short names above, or "float32", "float16", "half",
/// "bfloat16", "uint8", "int32", "int64" (case-sensitive). Throws qvg::Error otherwise.
DType parse_dtype(const std::string& name);

/// Axis order of a K/V tensor in a file.
enum class KvLayout : uint8_t {
  thd,  ///< [tokens, heads, dim]  (also [1, tokens, heads, dim])
  htd,  ///< [heads, tokens, dim]  (also [1, heads, tokens, dim]); HeadTensor's own order
};
/// "thd" or "htd".
const char* layout_name(KvLayout l);
/// Parses "thd" or "htd"; throws qvg::Error naming the string otherwise.
KvLayout parse_layout(const std::string& name);

/// One tensor as stored: little-endian elements in C (row-major) order.
struct RawTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  ///< may be empty (a scalar: one element); every entry >= 0
  std::vector<uint8_t> bytes;  ///< size numel() * dtype_size(dtype)

  /// Product of shape (1 for a scalar). Throws qvg::Error on negative dims or overflow.
  int64_t numel() const;
  /// Throws qvg::Error unless bytes.size() == numel() * dtype_size(dtype).
  void check(const std::string& what) const;
};

/// Several named tensors, in a stable (file) order.
using NamedTensors = std::vector<std::pair<std::string, RawTensor>>;

/// Throws qvg::Error unless `path` names a regular file (symbolic links followed). The
/// message starts with the path and names what it is instead: "cannot open: file not
/// found", "... is a directory", "... is a FIFO (named pipe)", "... is a socket",
/// "... is a character device" / "block device". Every reader (tensor files, model
/// weights, cache files) calls it before opening: a FIFO would block the open until
/// a writer appears, a device has no size, and a directory has no bytes.
void check_regular_file(const std::string& path);

/// The file a save to `path` replaces (StreamingKVCache::save, write_npy,
/// write_safetensors, save_kv), checked before anything is written: `path` when
/// nothing exists there yet (its directory is checked when the file is created)
/// or when it is a regular file; for a symbolic link, the file the link leads to
/// (every link followed: the save writes through it, the link stays, and the
/// temporary file goes in that file's directory). Throws qvg::Error, starting
/// with the path, for an empty path, a link that leads to no existing file, and
/// an existing target that is not a regular file, naming what it is ("a
/// directory", "a FIFO (named pipe)", "a socket", "a character device", "a block
/// device"): a save replaces regular files only (run as root, replacing
/// /dev/null with a file broke the system). A replaced file keeps its mode.
std::string save_target(const std::string& path);

/// Largest header (npy dict or safetensors JSON) a reader accepts: 100 MiB. Larger
/// length fields are treated as corruption rather than allocated.
inline constexpr uint64_t kMaxTensorHeaderBytes = 100ull << 20;

// ---- .npy -------------------------------------------------------------------------------

/// Reads a .npy file (format versions 1.0, 2.0 and 3.0; little-endian; C order).
/// @param path        the file
/// @param raw16_as    how to read 16-bit words whose descr does not say they are floats:
///                    '<V2' / '|V2' (what np.save writes for an ml_dtypes.bfloat16 array
///                    with ml_dtypes versions that register it as a void type), '<u2' and
///                    '<i2' (`x.view(np.uint16)`). Such files are read only when this is
///                    DType::bf16 or DType::f16; otherwise the error says to pass it.
///                    Ignored for files whose descr names a supported dtype.
/// Accepted descrs: '<f4' '<f2' '<V2'/'|V2' (with raw16_as) '|u1' '<i4' '<i8' and the
/// name 'bfloat16'; '=' and '|' are read as little-endian where numpy allows them.
/// Throws qvg::Error (message starts with the path) for: a missing or short file, a bad
/// magic string, an unknown version, a header longer than the file or than
/// kMaxTensorHeaderBytes, a malformed header dict, Fortran order, big-endian data, an
/// unsupported dtype (named, e.g. '<f8'), a pickled object array ('|O'), and data whose
/// size differs from shape x itemsize.
RawTensor read_npy(const std::string& path, std::optional<DType> raw16_as = std::nullopt);

/// Writes a .npy file: version 1.0 (2.0 when the header needs more than 65535 bytes),
/// header padded with spaces to a multiple of 64 bytes and ended by '\n', C order.
/// bf16 is written with descr '<V2' (like np.save of an ml_dtypes.bfloat16 array; in
/// Python: `np.load(p).view(ml_dtypes.bfloat16)`). Throws qvg::Error if t is inconsistent
/// (bytes vs shape) or the file cannot be written.
void write_npy(const std::string& path, const RawTensor& t);

// ---- .safetensors -------------------------------------------------------------------------

/// What a .safetensors header says about one tensor.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  ///< data_offsets[0], relative to the start of the data buffer
  uint64_t end = 0;    ///< data_offsets[1]
};

/// Reads and validates the header of a .safetensors file without reading tensor data.
/// Entries are in file order (sorted by begin offset). Validation: 8-byte length present,
/// length <= kMaxTensorHeaderBytes and <= file size - 8, JSON object, each entry has
/// dtype (F32 F16 BF16 U8 I32 I64; others named as unsupported), shape (non-negative
/// integers) and data_offsets [begin, end] with end - begin == numel x itemsize, offsets
/// inside the data buffer, no overlaps and no gaps (the buffer is entirely indexed, as
/// the format requires). "__metadata__" (string -> string) goes to *metadata if given.
std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path,
                                                      std::map<std::string, std::string>* metadata = nullptr);

/// Reads every tensor of a .safetensors file, in file order (see read_safetensors_header).
NamedTensors read_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata = nullptr);

/// Reads one tensor of a .safetensors file.
/// @param name  the tensor's name; "" is allowed when the file holds exactly one tensor.
///              An unknown name (or "" with several tensors) throws qvg::Error listing the
///              available names.
RawTensor read_safetensors_tensor(const std::string& path, const std::string& name = "");

/// Writes a .safetensors file holding `tensors` in the given order (data laid out in that
/// order, no gaps). Names must be unique, non-empty and not "__metadata__". The JSON header
/// lists the tensors in the same order and is padded with spaces so the data buffer starts
/// at an offset that is a multiple of 8. `metadata`, when non-empty, is written as
/// "__metadata__". Throws qvg::Error on bad names, inconsistent tensors or I/O failure.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// ---- K/V tensors ---------------------------------------------------------------------------

/// Converts a stored tensor to float32 [heads, tokens, dim].
/// @param t       f32, f16 or bf16; shape [A, B, D] or [1, A, B, D]
/// @param layout  thd: [A, B] = [tokens, heads]; htd: [A, B] = [heads, tokens]
/// @param what    names the source in error messages (a path, "path:name")
/// Any other rank, a leading dimension other than 1 in rank 4, or an integer dtype throws
/// qvg::Error naming `what` and the shape. Non-finite values are copied as they are (the
/// codecs reject them).
HeadTensor to_head_tensor(const RawTensor& t, KvLayout layout, const std::string& what = "tensor");

/// A tensor whose bytes are held elsewhere (a caller's array), laid out as a
/// RawTensor's.
struct RawTensorView {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};

/// to_head_tensor of a view: the same result and checks, without first
/// copying the bytes into a RawTensor.
HeadTensor to_head_tensor(const RawTensorView& t, KvLayout layout, const std::string& what = "tensor");

/// Converts float32 [heads, tokens, dim] to a stored tensor.
/// @param x              the tensor
/// @param layout         axis order of the result (see KvLayout)
/// @param dtype          f32, f16 or bf16 (f16/bf16 round to nearest even; f16 overflows to inf)
/// @param leading_batch  prepend a batch dimension of size 1 ([1, ...], rank 4)
RawTensor from_head_tensor(const HeadTensor& x, KvLayout layout, DType dtype,
                           bool leading_batch = false);

/// How a K/V tensor was stored, reported by load_kv so it can be written back alike.
struct KvFileInfo {
  DType dtype = DType::f32;    ///< stored element type
  std::vector<int64_t> shape;  ///< stored shape (rank 3, or rank 4 with a leading 1)
  bool leading_batch = false;  ///< true when the stored shape had the leading 1
};

/// Reads a K, V or Q tensor; the format is chosen by the extension (".npy" or
/// ".safetensors", case-insensitive); any other extension throws qvg::Error.
/// @param path      the file
/// @param layout    axis order in the file
/// @param name      safetensors tensor name ("" = the only tensor); must be "" for .npy
/// @param raw16_as  see read_npy (bf16 data in a .npy written through ml_dtypes)
/// @param info      if non-null, receives the stored dtype and shape
HeadTensor load_kv(const std::string& path, KvLayout layout, const std::string& name = "",
                   std::optional<DType> raw16_as = std::nullopt, KvFileInfo* info = nullptr);

/// Writes a K/V tensor (e.g. a reconstruction); format by extension as in load_kv.
/// @param path           the file (overwritten)
/// @param x              float32 [heads, tokens, dim]
/// @param layout         axis order in the file
/// @param dtype          f32, f16 or bf16
/// @param name           safetensors tensor name ("" = "tensor"); ignored for .npy
/// @param leading_batch  write [1, ...] (rank 4)
void save_kv(const std::string& path, const HeadTensor& x, KvLayout layout, DType dtype,
             const std::string& name = "", bool leading_batch = false);

}  // namespace qvg
