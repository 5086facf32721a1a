// Test helper: stories260K-hf (tests/data/models/stories260K-hf), the real tiny Llama (with
// tokenizer and a greedy oracle) that engine-level tests run on: its directory, the check that it
// is there, the model loaded once per test binary, and a fixture that checks and loads it.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "engine/model/model.h"
#include "tests/support/test_support.h"

namespace kvb::test {

/// <build>/test-data/models/stories260K-hf (a copy of tests/data/models/stories260K-hf).
inline const std::string kStoriesDir = test_data("models/stories260K-hf");

/// Asserts that stories260K-hf is there (use before stories_model()); it ships with the
/// repository, so its absence fails the test (KVB_REQUIRE_TEST_DATA).
#define KVB_REQUIRE_STORIES() KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors")

/// stories260K-hf loaded once per test binary (f32 weights). Throws kvb::Error when it is absent:
/// callers check KVB_REQUIRE_STORIES first.
inline std::shared_ptr<Model> stories_model() {
  static std::shared_ptr<Model> m = Model::load_dir(kStoriesDir);
  return m;
}

/// A fixture whose tests need stories260K-hf: SetUp checks it and sets model_. A derived
/// SetUp calls StoriesTest::SetUp() first and returns when IsSkipped() || HasFatalFailure().
class StoriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVB_REQUIRE_STORIES();
    model_ = stories_model();
  }
  const std::string dir_ = kStoriesDir;
  std::shared_ptr<const Model> model_;
};

}  // namespace kvb::test
