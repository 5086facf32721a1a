// Helpers the two nightly-regression tests share (test_ci_slow.cpp on the default model,
// test_ci_nightly.cpp on the real model): reading `kvbench compare`'s output.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace kvb::test {

/// The lines of `text` (a command's output) that contain `word`, in order, without their '\n'.
inline std::vector<std::string> lines_with(const std::string& text, const std::string& word) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find(word) != std::string::npos) out.push_back(l);
  return out;
}

}  // namespace kvb::test
