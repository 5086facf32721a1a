// Golden files made per fixture model (tools/gen_policy_model_goldens.py, gen_locret_goldens.py,
// gen_seerattn_goldens.py: {"models": [{"model": "models/tiny-llama3", ...}, ...]}) and the test
// suites parameterised over those models.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/util/io.h"
#include "tests/support/test_support.h"

namespace kvb::test {

/// The entry of fixture file `golden_file` (relative to tests/fixtures/) whose "model" is `model`
/// (a fixture path, "models/tiny-qwen3"); the file is parsed once. Throws kvb::Error when the file
/// is missing or not JSON, std::runtime_error naming both when it holds no entry for `model`.
inline const nlohmann::json& model_golden(const std::string& golden_file, const std::string& model) {
  static std::map<std::string, nlohmann::json> files;
  auto it = files.find(golden_file);
  if (it == files.end()) it = files.emplace(golden_file, parse_json_file(fixture(golden_file))).first;
  for (const auto& g : it->second["models"])
    if (g["model"] == model) return g;
  throw std::runtime_error(golden_file + " has no golden for " + model);
}

/// The fixture models the per-model goldens are made for.
inline auto golden_models() { return ::testing::Values("models/tiny-llama3", "models/tiny-qwen3"); }

/// The test-name suffix of a fixture model path: "models/tiny-llama3" -> "tiny_llama3"
/// (INSTANTIATE_TEST_SUITE_P's name generator).
inline std::string model_test_name(const ::testing::TestParamInfo<std::string>& i) {
  std::string n = i.param.substr(i.param.find('/') + 1);
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

}  // namespace kvb::test
