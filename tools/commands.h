// Subcommands defined in their own files. main.cpp registers each with
// add_*_command before parsing and calls run_*_command when it was chosen.
#pragma once

#include <CLI/CLI.hpp>

namespace qvg_cli {

/// `qvg stream`: simulated autoregressive generation through StreamingKVCache
/// (tools/cmd_stream.cpp). The options are kept inside that file.
CLI::App* add_stream_command(CLI::App& app);
/// Runs `qvg stream` with the parsed options; returns the exit status. Throws
/// qvg::Error (main prints it) on bad data or files.
int run_stream_command();

/// `qvg generate`: continues a clip with the reference video model, its KV
/// cache in the streaming cache (tools/cmd_generate.cpp).
CLI::App* add_generate_command(CLI::App& app);
/// Runs `qvg generate` with the parsed options; returns the exit status.
int run_generate_command();
/// `qvg dump-kv`: the model's per-layer Q, K (pre/post-RoPE) and V for a clip
/// (tools/cmd_generate.cpp).
CLI::App* add_dump_kv_command(CLI::App& app);
int run_dump_kv_command();
/// `qvg compare`: BF16 vs each cache on the same continuation (tools/cmd_generate.cpp).
CLI::App* add_compare_command(CLI::App& app);
int run_compare_command();
/// `qvg demo`: compare on a held-out clip with the demo's defaults (tools/cmd_generate.cpp).
CLI::App* add_demo_command(CLI::App& app);
int run_demo_command();
/// `qvg inspect FILE`: a saved cache's config and memory, or a K/V file's
/// tensors (tools/cmd_inspect.cpp).
CLI::App* add_inspect_command(CLI::App& app);
int run_inspect_command();

}  // namespace qvg_cli
