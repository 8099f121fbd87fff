#!/usr/bin/env bash
# The main job: install, build, and run `qvg demo` (methods side by side on built-in data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec "${QVG_BUILD_DIR:-build}/qvg" demo "$@"
