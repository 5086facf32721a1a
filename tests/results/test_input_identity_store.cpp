// Issue 40: the input identity of a run in the results store (schema v6). A run records the
// hashes of the files it read; resuming it with other files, or merging it with a copy of the
// same run made on other files, is refused naming the first changed file, and nothing is
// written; a run stored before v6 (inputs unknown) is not resumed; v4 files migrate.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "legacy_db.h"
#include "results/store.h"
#include "synth.h"
#include "tests/support/test_support.h"

using namespace kvb::results;
using namespace kvb::results::testing;

namespace {

RunInput input(const std::string& role, const std::string& name, const std::string& content,
               const std::string& dir = "/data/m") {
  return {role, "m", name, dir + "/" + name, static_cast<int64_t>(content.size()), kvb::sha256_hex(content)};
}

RunInfo info_with(const std::vector<RunInput>& inputs) {
  RunInfo info = run_info("inputs");
  info.inputs = inputs;
  return info;
}

std::string one(Store& s, const std::string& sql) { return s.query(sql).at(0).at(0); }

const std::vector<RunInput> kInputs = {input("weights", "model.safetensors", "W1"),
                                       input("tokenizer", "tokenizer.json", "T1"),
                                       input("dataset", "gsm8k/test.jsonl", "D1")};

}  // namespace

TEST(InputIdentity, DigestIgnoresOrderPathsAndSizesButNotContent) {
  std::vector<RunInput> moved = {kInputs[2], kInputs[0], kInputs[1]};
  for (auto& in : moved) {
    in.path = "/elsewhere/" + in.name;  // another machine's mirror
    in.bytes += 1;
  }
  EXPECT_EQ(inputs_digest(kInputs), inputs_digest(moved));
  std::vector<RunInput> changed = kInputs;
  changed[1] = input("tokenizer", "tokenizer.json", "T2");
  EXPECT_NE(inputs_digest(kInputs), inputs_digest(changed));
  EXPECT_EQ(describe_input_change(kInputs, moved, 1), std::nullopt);
}

TEST(InputIdentity, DescribeNamesTheFirstChangedFileAndCountsTheRest) {
  std::vector<RunInput> now = kInputs;
  now[0] = input("weights", "model.safetensors", "W2");
  auto d = describe_input_change(kInputs, now, 3);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "/data/m/model.safetensors: content changed since run 3 (weights sha256 " +
                    kvb::sha256_hex("W1").substr(0, 16) + " -> " + kvb::sha256_hex("W2").substr(0, 16) + ")");
  now[2] = input("dataset", "gsm8k/test.jsonl", "D2");
  now.push_back(input("chat_template", "chat_template.jinja", "{{x}}"));
  d = describe_input_change(kInputs, now, 3);
  ASSERT_TRUE(d);
  EXPECT_NE(d->find(", and 2 more changed input(s)"), std::string::npos) << *d;
  // Added and removed files.
  d = describe_input_change(kInputs, {kInputs[0], kInputs[1], kInputs[2], now.back()}, 1);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "/data/m/chat_template.jinja: not read by run 1 (a new chat_template file)");
  d = describe_input_change(kInputs, {kInputs[0], kInputs[2]}, 1);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "/data/m/tokenizer.json: read by run 1 (tokenizer file) but not now");
}

TEST(InputIdentity, ResumeWithChangedInputsIsRefusedAndWritesNothing) {
  const std::string p = temp_db("ii_resume");
  Store s(p);
  const int64_t run = fill(s, expand_grid(small_grid(2, 1)), info_with(kInputs));
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM run_inputs WHERE run_id = " + std::to_string(run)), "3");
  EXPECT_EQ(one(s, "SELECT inputs_sha256 FROM runs"), inputs_digest(kInputs));
  // Unchanged: the same run again (another part).
  EXPECT_EQ(s.begin_run(info_with(kInputs)), run);
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM run_parts"), "2");
  std::vector<RunInput> changed = kInputs;
  changed[2] = input("dataset", "gsm8k/test.jsonl", "D2");
  const std::string msg = kvb::test::input_error_of([&] { s.begin_run(info_with(changed)); });
  EXPECT_TRUE(kvb::test::contains_all(
      msg, {"/data/m/gsm8k/test.jsonl: content changed since run 1 (dataset sha256", " in " + p, "--run-name"}));
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM run_parts"), "2");
  EXPECT_EQ(one(s, "SELECT inputs_sha256 FROM runs"), inputs_digest(kInputs)) << "the run row is untouched";
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM run_inputs"), "3");
  EXPECT_EQ(s.run_inputs(run).at(2).sha256, kvb::sha256_hex("D1"));
}

TEST(InputIdentity, V4DatabaseMigratesAndItsRunsWithUnknownInputsAreNotResumed) {
  const std::string p = temp_db("ii_v4");
  const auto items = expand_grid(small_grid(2, 1));
  write_legacy_db(p, items, 4);
  Store s(p);
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM runs WHERE inputs_sha256 IS NULL"), "1");
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM run_inputs"), "0");
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM file_hashes"), "0");
  RunInfo old = info_with(kInputs);
  old.run_key = "old-key";
  const std::string msg = kvb::test::input_error_of([&] { s.begin_run(old); });
  EXPECT_TRUE(kvb::test::contains_all(msg, {p + ": run 1: stored before schema v6", "--run-name"}));
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM run_parts"), "0");
  // Its rows still read, and a new run goes beside it.
  EXPECT_EQ(s.samples({1}).size(), items.size());
  EXPECT_EQ(s.begin_run(info_with(kInputs)), 2);
}

TEST(InputIdentity, FileHashCacheRoundTrips) {
  const std::string p = temp_db("ii_cache");
  Store s(p);
  EXPECT_EQ(s.cached_file_hash("/m/model.safetensors"), std::nullopt);
  FileHash h{"/m/model.safetensors", 1, 2, 3, 4, 5, std::string(64, 'c')};
  s.put_file_hashes({h});
  h.sha256 = std::string(64, 'd');
  s.put_file_hashes({h});  // replaced
  auto got = s.cached_file_hash("/m/model.safetensors");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->sha256, std::string(64, 'd'));
  EXPECT_EQ(got->ctime_ns, 5);
  EXPECT_EQ(one(s, "SELECT COUNT(*) FROM file_hashes"), "1");
}

TEST(InputIdentity, MergeRefusesTheSameRunOnOtherFilesBeforeWritingAnything) {
  const auto items = expand_grid(small_grid(2, 1));
  const std::string a = temp_db("ii_ma"), b = temp_db("ii_mb"), c = temp_db("ii_mc"), out = temp_db("ii_mout");
  {
    Store sa(a), sc(c);
    fill(sa, items, info_with(kInputs));
    fill(sc, items, info_with(kInputs));
  }
  std::vector<RunInput> changed = kInputs;
  changed[1] = input("tokenizer", "tokenizer.json", "T2");
  {
    Store sb(b);
    fill(sb, items, info_with(changed));
  }
  std::string msg = kvb::test::input_error_of([&] { Store::merge(out, {a, b}); });
  EXPECT_TRUE(kvb::test::contains_all(msg, {b + ": merge: run 1 has the run key of run 1 in " + a,
                                            "/data/m/tokenizer.json: content changed since run 1 (tokenizer sha256"}));
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written";
  // Model weights recorded in run_models are compared too (also for runs without recorded inputs).
  {
    Store sb(b);
    sb.exec("UPDATE runs SET inputs_sha256 = NULL; DELETE FROM run_inputs; UPDATE run_models SET weights_sha256 = '" +
            std::string(64, 'e') + "'");
  }
  msg = kvb::test::input_error_of([&] { Store::merge(out, {a, b}); });
  EXPECT_TRUE(kvb::test::contains_all(msg, {"model stories260K: weights sha256 aaaaaaaaaaaaaaaa -> eeeeeeeeeeeeeeee"}));
  EXPECT_FALSE(std::filesystem::exists(out));
  // The same run on the same files: merged into one run with its inputs.
  Store::merge(out, {a, c});
  Store m(out);
  EXPECT_EQ(one(m, "SELECT COUNT(*) FROM runs"), "1");
  EXPECT_EQ(one(m, "SELECT inputs_sha256 FROM runs"), inputs_digest(kInputs));
  EXPECT_EQ(one(m, "SELECT COUNT(*) FROM run_inputs"), "3");
  // A copy with unknown inputs (before v6) and the same weights joins, the known inputs kept.
  {
    Store sb(b);
    sb.exec("UPDATE run_models SET weights_sha256 = '" + std::string(64, 'a') + "'");
  }
  Store::merge(out, {b});
  EXPECT_EQ(one(m, "SELECT inputs_sha256 FROM runs"), inputs_digest(kInputs));
  EXPECT_EQ(one(m, "SELECT COUNT(*) FROM run_inputs"), "3");
}
