// Where the shipped clips and model weights are (include/qvg/data.h): an
// installed qvg's share/qvg beside its executable's prefix, else the source
// tree recorded at build time.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "qvg/data.h"

#ifndef QVG_SOURCE_ROOT
#define QVG_SOURCE_ROOT "."
#endif

namespace qvg {

std::vector<std::string> resource_roots() {
  std::vector<std::string> roots;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path()) roots.push_back((exe.parent_path().parent_path() / "share" / "qvg").string());
  roots.push_back(QVG_SOURCE_ROOT);
  return roots;
}

std::string resource_path(const std::string& relative) {
  const std::vector<std::string> roots = resource_roots();
  std::error_code ec;
  for (const std::string& r : roots)
    if (std::filesystem::exists(std::filesystem::path(r) / relative, ec)) return r + "/" + relative;
  return roots.back() + "/" + relative;
}

std::string resource_search(const std::string& relative) {
  std::string s = "looked in ";
  const std::vector<std::string> roots = resource_roots();
  for (size_t i = 0; i < roots.size(); ++i) s += (i ? ", " : "") + roots[i] + "/" + relative;
  return s;
}

}  // namespace qvg
