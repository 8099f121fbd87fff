// qvg: command-line front end. Thin: each subcommand (tools/cmd_*.cpp)
// parses its options, loads data, calls the library and prints tables or
// JSON. Every library error ends in a message on stderr and exit status 1
// (2 for bad command-line usage).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include "commands.h"
#include "model_run.h"
#include "qvg/common.h"
#include "qvg/data.h"
#include "qvg/version.h"

int main(int argc, char** argv) {
  CLI::App app{"qvg: 2-4 bit KV-cache compression for autoregressive video diffusion (Quant VideoGen)"};
  // The module is built beside the build tree's CLI; cmake --install does not install it (pip install . does).
  std::string python = "not installed with this CLI (pip install . installs it)";
#if defined(QVG_BUILD_DIR)
  std::error_code ec;
  const auto exe_dir = std::filesystem::canonical("/proc/self/exe", ec).parent_path();
  if (!ec && exe_dir == std::filesystem::weakly_canonical(QVG_BUILD_DIR, ec) && !ec)
    python = "built beside it in " QVG_BUILD_DIR "/python (PYTHONPATH; pip install . installs it)";
#endif
  app.set_version_flag("--version", qvg::build_info() + ", Python module: " + python + "\nclips: " +
                                        qvg::data_dir() + "/clips\nmodel: " + qvg::resource_path(qvg_cli::kModelFile));
  app.require_subcommand(1);
  qvg_cli::add_eval_command(app);
  qvg_cli::add_codec_demo_command(app);
  qvg_cli::add_methods_command(app);
  qvg_cli::add_stream_command(app);
  qvg_cli::add_generate_command(app);
  qvg_cli::add_dump_kv_command(app);
  qvg_cli::add_compare_command(app);
  qvg_cli::add_demo_command(app);
  qvg_cli::add_inspect_command(app);
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback once its options have passed
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "qvg: error: out of memory (std::bad_alloc): the inputs or the run are too large for this "
                         "machine's memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qvg: error: %s\n", qvg::printable(e.what()).c_str());  // (may quote a file's bytes)
    return 1;
  }
  return 0;
}
