// The subcommands, each defined in its own file. add_*_command registers one
// on `app`: its options live in a struct made there and owned by the
// subcommand's callback, which runs the command once parsing has passed
// (inside app.parse). Errors are thrown (qvg::Error); main prints them and
// exits with status 1.
#pragma once

#include <CLI/CLI.hpp>

namespace qvg_cli {

/// `qvg eval`: methods side by side on K/V files or built-in data
/// (tools/cmd_eval.cpp).
void add_eval_command(CLI::App& app);
/// `qvg codec-demo`: eval on both built-in data sets, with a summary against
/// RTN (tools/cmd_eval.cpp).
void add_codec_demo_command(CLI::App& app);
/// `qvg methods`: the methods, presets and codec keys (tools/cmd_eval.cpp).
void add_methods_command(CLI::App& app);

/// `qvg stream`: simulated autoregressive generation through
/// StreamingKVCache (tools/cmd_stream.cpp).
void add_stream_command(CLI::App& app);

/// `qvg generate`: continues a clip with the reference video model, its KV
/// cache in the streaming cache (tools/cmd_generate.cpp).
void add_generate_command(CLI::App& app);
/// `qvg dump-kv`: the model's per-layer Q, K (pre/post-RoPE) and V for a clip
/// (tools/cmd_generate.cpp).
void add_dump_kv_command(CLI::App& app);
/// `qvg compare`: BF16 vs each cache on the same continuation (tools/cmd_compare.cpp).
void add_compare_command(CLI::App& app);
/// `qvg demo`: compare on a held-out clip with the demo's defaults (tools/cmd_compare.cpp).
void add_demo_command(CLI::App& app);

/// `qvg inspect FILE`: a saved cache's config and memory, or a K/V file's
/// tensors (tools/cmd_inspect.cpp).
void add_inspect_command(CLI::App& app);

}  // namespace qvg_cli
