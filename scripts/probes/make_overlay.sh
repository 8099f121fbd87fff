#!/usr/bin/env bash
# Writes the files a git revision changes against HEAD into a folder that
# mirrors the repository, for scripts/probes/gpu_ab.sh (the GPU machine gets the
# working tree, not the history):
#   scripts/probes/make_overlay.sh REV DIR      e.g. scripts/probes/make_overlay.sh wip/x ab/x
# DIR should be ignored by git (e.g. listed in .git/info/exclude) and carried
# to the GPU machine. Files the revision deletes are not supported.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:?usage: make_overlay.sh REV DIR}
dir=${2:?usage: make_overlay.sh REV DIR}
git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "make_overlay.sh: no revision '$rev'" >&2; exit 2; }
if git diff --name-only --diff-filter=D HEAD "$rev" | grep -q .; then
  echo "make_overlay.sh: $rev deletes files; an overlay cannot express that" >&2
  exit 2
fi
rm -rf "$dir"
n=0
while read -r f; do
  mkdir -p "$dir/$(dirname "$f")"
  git show "$rev:$f" >"$dir/$f"
  n=$((n + 1))
done < <(git diff --name-only HEAD "$rev")
echo "make_overlay.sh: $n files of $rev in $dir"
