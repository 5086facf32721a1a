// LongBench v1 metrics and LongBench-v2 choice extraction against goldens from the reference
// implementations (tools/gen_longbench_grader_goldens.py: LongBench metrics.py re-typed from the
// reference note, calling the PyPI `rouge` and `fuzzywuzzy` packages LongBench uses).
// Chinese variants: retrieval_zh is the reference as is; qa_f1_zh and rouge_zh goldens are the
// reference formulas on CHARACTER tokens (kvbench is character-level by design; LongBench uses
// jieba words — each row's "score_jieba" records the jieba value, which is not compared).
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graders/grade.h"
#include "graders/longbench.h"
#include "tests/support/test_support.h"

namespace kvb::graders {
namespace {

// Python " ".join(list(s)): the code points of s separated by spaces (rouge_zh on characters).
std::string spaced_chars(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (i) out += ' ';
    out += s.substr(i, n);
    i += n;
  }
  return out;
}

TEST(LongBenchGoldens, EveryMetricMatchesTheReference) {
  std::ifstream in(std::string(KVB_SOURCE_DIR) + "/tests/fixtures/graders/longbench_goldens.jsonl");
  ASSERT_TRUE(in);
  std::map<std::string, int> count;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    std::string m = j["metric"], p = j["pred"], g = j["gold"];
    double want = j["score"], got = -1;
    if (m == "qa_f1") got = qa_f1(p, g);
    else if (m == "rouge") got = rouge_l(p, g);
    else if (m == "classification") got = classification_score(p, g, j["all_classes"].get<std::vector<std::string>>());
    else if (m == "retrieval") got = retrieval_score(p, g);
    else if (m == "count") got = count_score(p, g);
    else if (m == "code_sim") got = code_sim_score(p, g);
    else if (m == "qa_f1_zh") {
      ASSERT_EQ(j["tokens"], "chars");
      got = qa_f1_chars(p, g);
      EXPECT_NEAR(grade("longbench.qa_f1_zh", p, {g}).score, want, 1e-9) << p;  // the registry's binding
    } else if (m == "rouge_zh") {
      ASSERT_EQ(j["tokens"], "chars");
      got = rouge_l_chars(p, g);
      EXPECT_NEAR(rouge_l(spaced_chars(p), spaced_chars(g)), want, 1e-9) << p;  // the same, spelled out here
      EXPECT_NEAR(grade("longbench.rouge_zh", p, {g}).score, want, 1e-9) << p;  // the registry's binding
    } else if (m == "retrieval_zh") {
      got = retrieval_score(p, g, true);
      EXPECT_NEAR(grade("longbench.retrieval_zh", p, {g}).score, want, 1e-9) << p;
    } else if (m == "choice_v2") {
      auto c = extract_choice_v2(p);
      EXPECT_EQ(c ? std::string(1, *c) : "", j["extracted"].get<std::string>()) << p;
      got = (c && std::string(1, *c) == g) ? 1.0 : 0.0;
    }
    EXPECT_NEAR(got, want, 1e-9) << m << " pred=[" << p << "] gold=[" << g << "]";
    ++count[m];
  }
  for (const char* m : {"qa_f1", "rouge", "classification", "retrieval", "count", "code_sim", "choice_v2", "qa_f1_zh",
                        "rouge_zh", "retrieval_zh"})
    EXPECT_GE(count[m], 20) << m;
}

TEST(LongBench, RegistryTakesMaxOverReferencesAndFirstLine) {
  Grade g = grade("longbench.qa_f1", "Paris\nsecond line", {"London", "Paris"}, {{"first_line", true}});
  EXPECT_DOUBLE_EQ(g.score, 1.0);
  EXPECT_EQ(g.extracted, "Paris");
  EXPECT_THROW(grade("longbench.classification", "x", {"y"}), std::exception);  // needs all_classes
  EXPECT_DOUBLE_EQ(grade("longbench_v2.choice", "The correct answer is (B)", {"B"}).score, 1.0);
}

// Issue 40: ROUGE-L keeps one bit per LCS cell and caps a side at kRougeMaxWords words (score 0
// past it, as LongBench's reference scores 0 when the package's recursive LCS hits Python's
// recursion limit); fuzz.ratio caps its LCS at kFuzzRatioMaxCells steps.
TEST(LongBench, LongInputsAreBounded) {
  auto words = [](size_t n, const std::string& prefix) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += (i ? " " : "") + prefix + std::to_string(i % 997);
    return s;
  };
  const std::string at_cap = words(kRougeMaxWords, "w");
  const auto t0 = std::chrono::steady_clock::now();
  // The same 8,192 words on both sides: every distinct word is in the LCS, P = R = 1.
  EXPECT_NEAR(rouge_l(at_cap, at_cap), 1.0, 1e-7);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            10.0 * kvb::test::time_scale());        // linear work; the sanitizer build is slower
  EXPECT_EQ(rouge_l(at_cap + " w1", at_cap), 0.0);  // one word past the cap
  EXPECT_EQ(rouge_l(at_cap, at_cap + " w1"), 0.0);
  // Many one-word sentences: every sentence pair is an LCS of its own, within the same cap.
  std::string dots;
  for (int i = 0; i < 3000; ++i) dots += "w" + std::to_string(i % 50) + ". ";
  EXPECT_NEAR(rouge_l(dots, dots), 1.0, 1e-7);
  // rouge_zh counts characters.
  std::string zh;
  for (size_t i = 0; i <= kRougeMaxWords; ++i) zh += "中";
  EXPECT_EQ(rouge_l_chars(zh, zh), 0.0);       // one character past the cap
  const std::string at_cap_zh = zh.substr(3);  // "中" is 3 bytes: exactly the cap
  EXPECT_NEAR(rouge_l_chars(at_cap_zh, at_cap_zh), 1.0, 1e-7);
  EXPECT_EQ(rouge_l_chars(at_cap_zh, zh), 0.0);  // a side past the cap scores 0
  // fuzz.ratio: up to 2^28 cells computed, past it 0 unless equal.
  const std::string a(16384, 'x'), b(16384, 'y');
  EXPECT_EQ(fuzz_ratio(a, std::string(16383, 'x') + "y"), 100);  // 2 * 16383 / 32768 = 99.99...
  EXPECT_EQ(fuzz_ratio(a + "x", b), 0);
  EXPECT_EQ(fuzz_ratio(std::string(115000, 'x'), std::string(115000, 'x')), 100);
  EXPECT_EQ(fuzz_ratio(std::string(115000, 'x'), std::string(115000, 'y')), 0);
}

TEST(LongBench, ChineseCharF1) {
  EXPECT_DOUBLE_EQ(qa_f1_chars("北京。", "北京"), 1.0);
  EXPECT_NEAR(qa_f1_chars("北京市", "北京"), 0.8, 1e-12);
}

}  // namespace
}  // namespace kvb::graders
