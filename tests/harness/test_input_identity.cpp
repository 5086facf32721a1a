// Issue 40, item 3: a resumed `kvbench run` never mixes results of changed inputs, and `kvbench
// merge` never joins a run with the same run made on other files. Through the binary on a copy of
// stories260K-hf and of gsm8k's test file: a changed tensor byte, tokenizer, dataset record or a
// new chat template is refused naming the file (exit 2, nothing stored), another --run-name starts
// a new run, an unchanged resume still resumes (its hashes from the cache), and a file rewritten
// in place with its size and mtime put back is still seen as changed (ctime); `grade --regrade`
// refuses a changed dataset file. Also the pieces of
// harness/input_identity.h without the binary.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/util/hash.h"
#include "harness/input_identity.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;

namespace {

const std::string kModelSrc = std::string(KVB_TEST_DATA_DIR) + "/models/stories260K-hf";
const std::string kGsm8k = std::string(KVB_TEST_DATA_DIR) + "/datasets/gsm8k/test.jsonl";

#define REQUIRE_INPUTS()                                            \
  KVB_REQUIRE_BINARY();                                             \
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors"); \
  KVB_REQUIRE_TEST_DATA("datasets/gsm8k/test.jsonl")

/// A writable copy of stories260K-hf at d/model and of gsm8k/test.jsonl at d/data/gsm8k.
void copy_inputs(const fs::path& d) {
  fs::create_directories(d / "model");
  for (const auto& e : fs::directory_iterator(kModelSrc)) {
    fs::copy_file(e.path(), d / "model" / e.path().filename());
    fs::permissions(d / "model" / e.path().filename(), fs::perms::owner_write, fs::perm_options::add);
  }
  fs::create_directories(d / "data" / "gsm8k");
  fs::copy_file(kGsm8k, d / "data" / "gsm8k" / "test.jsonl");
  fs::permissions(d / "data" / "gsm8k" / "test.jsonl", fs::perms::owner_write, fs::perm_options::add);
}

/// The run command on the copies (2 examples, full cache, 4 new tokens) into `db`.
std::string run_cmd(const fs::path& d, const std::string& db, const std::string& extra = "") {
  return std::string(KVB_BINARY) + " run --task gsm8k --model " + (d / "model").string() + " --data-dir " +
         (d / "data").string() + " --policies full --limit 2 --max-new-tokens 4 --quiet --db " + db + extra;
}

int64_t count(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int64(st, 0);
    else ADD_FAILURE() << sql << ": " << sqlite3_errmsg(h);
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return n;
}

/// Flips byte `at` (from the end when negative) of `p` in place, size unchanged.
void flip_byte(const fs::path& p, long at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at, at < 0 ? std::ios::end : std::ios::beg);
  const auto pos = f.tellg();
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(pos);
  f.write(&c, 1);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(InputIdentityCli, ChangedWeightsAreRefusedOnResumeAndANewRunNameStartsANewRun) {
  REQUIRE_INPUTS();
  const fs::path d = kvb::test::temp_dir("ii_weights");
  copy_inputs(d);
  const std::string db = (d / "r.db").string();
  const fs::path st = d / "model" / "model.safetensors";
  const std::string sha_before = kvb::sha256_file(st.string());
  std::string out;
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 0) << out;
  ASSERT_EQ(count(db, "SELECT COUNT(*) FROM generations"), 2);
  // The run recorded every file it read, with its hash.
  EXPECT_EQ(count(db,
                  "SELECT COUNT(*) FROM run_inputs WHERE run_id = 1 AND role = 'weights' AND name = "
                  "'model.safetensors' AND sha256 = '" +
                      sha_before + "'"),
            1);
  for (const char* name :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "gsm8k/test.jsonl"})
    EXPECT_EQ(count(db, std::string("SELECT COUNT(*) FROM run_inputs WHERE name = '") + name + "'"), 1) << name;
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs WHERE inputs_sha256 IS NOT NULL"), 1);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM run_datasets WHERE sha256 = '" + kvb::sha256_file(kGsm8k) + "'"), 1);

  // One byte of the last tensor's data changes: the same command is refused, naming the file.
  flip_byte(st, -1);
  const std::string sha_after = kvb::sha256_file(st.string());
  ASSERT_NE(sha_before, sha_after);
  EXPECT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 2) << out;
  EXPECT_TRUE(kvb::test::contains_all(
      out, {"kvbench: error: " + st.string() + ": content changed since run 1 (weights sha256 " +
                sha_before.substr(0, 16) + " -> " + sha_after.substr(0, 16) + ")",
            "--run-name"}));
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations"), 2) << "nothing stored";
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs"), 1);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM run_parts"), 1) << "the refused process left no part behind";

  // Another run name is a new run: run 1 keeps its 2 samples of the old weights (not 4).
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, db, " --run-name changed"), &out), 0) << out;
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations WHERE run_id = 1"), 2);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations WHERE run_id = 2"), 2);
  EXPECT_EQ(count(db,
                  "SELECT COUNT(DISTINCT w.model_revision) FROM generations g JOIN work_items w USING (item_key) "
                  "WHERE g.run_id = 1"),
            1);
  fs::remove_all(d);
}

TEST(InputIdentityCli, ChangedTokenizerDatasetRecordOrNewChatTemplateIsRefused) {
  REQUIRE_INPUTS();
  const fs::path d = kvb::test::temp_dir("ii_tok");
  copy_inputs(d);
  const std::string db = (d / "r.db").string();
  std::string out;
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 0) << out;

  // The tokenizer: still valid JSON, other bytes. Before issue 40 this said "2 already stored".
  const fs::path tok = d / "model" / "tokenizer.json";
  const std::string tok_text = slurp(tok);
  std::ofstream(tok, std::ios::app) << "\n";
  EXPECT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 2) << out;
  EXPECT_NE(out.find("kvbench: error: " + tok.string() + ": content changed since run 1 (tokenizer sha256"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("already stored"), std::string::npos) << out;
  std::ofstream(tok, std::ios::trunc | std::ios::binary) << tok_text;  // put back: the run resumes again
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 0) << out;
  EXPECT_NE(out.find("2 already stored, 0 to generate"), std::string::npos) << out;

  // A dataset record: the first example's gold answer changes.
  const fs::path data = d / "data" / "gsm8k" / "test.jsonl";
  std::string text = slurp(data);
  const size_t at = text.find("#### 18");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 7, "#### 19");
  std::ofstream(data, std::ios::trunc | std::ios::binary) << text;
  EXPECT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 2) << out;
  EXPECT_NE(out.find("gsm8k/test.jsonl: content changed since run 1 (dataset sha256"), std::string::npos) << out;
  // Re-grading the run's samples against the changed gold is refused too, the grades unchanged.
  const int64_t graded = count(db, "SELECT COUNT(*) FROM grades");
  EXPECT_EQ(kvb::test::run_command(std::string(KVB_BINARY) + " grade --regrade --db " + db, &out), 2) << out;
  EXPECT_TRUE(kvb::test::contains_all(
      out, {"gsm8k/test.jsonl: content changed since run 1 (dataset sha256", "grading run 1 against other data"}));
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM grades"), graded);

  // A chat template that was not there: a new input.
  text.replace(at, 7, "#### 18");
  std::ofstream(data, std::ios::trunc | std::ios::binary) << text;
  std::ofstream(d / "model" / "chat_template.jinja") << "{{ messages[0]['content'] }}";
  EXPECT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 2) << out;
  EXPECT_NE(out.find((d / "model" / "chat_template.jinja").string() + ": not read by run 1 (a new chat_template file)"),
            std::string::npos)
      << out;
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM generations"), 2);
  EXPECT_EQ(count(db, "SELECT COUNT(*) FROM runs"), 1);
  fs::remove_all(d);
}

TEST(InputIdentityCli, UnchangedResumeUsesTheHashCacheAndAnInPlaceRewriteWithOldMtimeIsStillSeen) {
  REQUIRE_INPUTS();
  const fs::path d = kvb::test::temp_dir("ii_cache");
  copy_inputs(d);
  // Files modified within the last 2 s are never cached (racy window): let the copies age.
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  const std::string db = (d / "r.db").string();
  std::string out;
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 0) << out;
  EXPECT_NE(out.find("0.0 MB from the hash cache"), std::string::npos) << out;
  const std::string st = (d / "model" / "model.safetensors").string();
  EXPECT_EQ(
      count(db, "SELECT COUNT(*) FROM file_hashes WHERE path = '" + st + "' AND sha256 = '" + kvb::sha256_file(st) + "'"),
      1);
  // An unchanged rerun resumes with nothing to do, and reads no file to hash it.
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 0) << out;
  EXPECT_NE(out.find("2 already stored, 0 to generate"), std::string::npos) << out;
  EXPECT_NE(out.find("(0.0 MB read, 1."), std::string::npos) << out;  // ~1.07 MB of model + data from the cache

  // One byte rewritten in place, then size and mtime put back as they were: the ctime moved, so
  // the cached hash is not used and the change is refused.
  struct stat before {};
  ASSERT_EQ(::stat(st.c_str(), &before), 0);
  flip_byte(st, -1);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, st.c_str(), times, 0), 0);
  EXPECT_EQ(kvb::test::run_command(run_cmd(d, db), &out), 2) << out;
  EXPECT_NE(out.find(st + ": content changed since run 1 (weights sha256"), std::string::npos) << out;
  fs::remove_all(d);
}

TEST(InputIdentityCli, MergeRefusesTheSameRunOnOtherWeights) {
  REQUIRE_INPUTS();
  const fs::path d = kvb::test::temp_dir("ii_merge");
  copy_inputs(d);
  const std::string a = (d / "a.db").string(), a2 = (d / "a2.db").string(), b = (d / "b.db").string();
  std::string out;
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, a), &out), 0) << out;
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, a2), &out), 0) << out;
  const fs::path st = d / "model" / "model.safetensors";
  flip_byte(st, -1);
  ASSERT_EQ(kvb::test::run_command(run_cmd(d, b), &out), 0) << out;  // a fresh DB: a fresh run

  // Same run key, same model path, other weights: refused, naming the input; no output written.
  const std::string merged = (d / "m.db").string();
  EXPECT_EQ(kvb::test::run_command(std::string(KVB_BINARY) + " merge " + merged + " " + a + " " + b, &out), 2) << out;
  EXPECT_TRUE(kvb::test::contains_all(
      out, {"kvbench: error: " + b + ": merge: run 1 has the run key of run 1 in " + a + " but read other files",
            "model " + (d / "model").string() + ": weights sha256"}));
  EXPECT_FALSE(fs::exists(merged));
  // Into an existing output holding the first run: refused too, and the output is unchanged.
  ASSERT_EQ(kvb::test::run_command(std::string(KVB_BINARY) + " merge " + merged + " " + a, &out), 0) << out;
  EXPECT_EQ(kvb::test::run_command(std::string(KVB_BINARY) + " merge " + merged + " " + b, &out), 2) << out;
  EXPECT_EQ(count(merged, "SELECT COUNT(*) FROM generations"), 2);
  // The same run made twice on the same files merges (one run, its inputs recorded once).
  ASSERT_EQ(kvb::test::run_command(std::string(KVB_BINARY) + " merge " + merged + " " + a2, &out), 0) << out;
  EXPECT_EQ(count(merged, "SELECT COUNT(*) FROM runs"), 1);
  EXPECT_EQ(count(merged, "SELECT COUNT(*) FROM run_inputs"), count(a, "SELECT COUNT(*) FROM run_inputs"));
  EXPECT_EQ(count(merged, "SELECT COUNT(*) FROM runs WHERE inputs_sha256 IS NOT NULL"), 1);
  fs::remove_all(d);
}

TEST(InputIdentity, CacheableOnlyWhenUnchangedAndOlderThanTheRacyWindow) {
  kvb::cli::FileStat s;
  s.dev = 1;
  s.inode = 2;
  s.bytes = 3;
  s.mtime_ns = 10'000'000'000;
  s.ctime_ns = 10'000'000'000;
  EXPECT_TRUE(kvb::cli::hash_cacheable(s, s, 12'000'000'000));
  EXPECT_FALSE(kvb::cli::hash_cacheable(s, s, 11'999'999'999));  // modified within 2 s of the hashing
  kvb::cli::FileStat later = s;
  later.ctime_ns += 1;
  EXPECT_FALSE(kvb::cli::hash_cacheable(s, later, 20'000'000'000));  // changed while read
  later = s;
  later.ctime_ns = 19'000'000'000;
  EXPECT_FALSE(kvb::cli::hash_cacheable(later, later, 20'000'000'000));  // ctime recent, mtime old
}

TEST(InputIdentity, ModelAndDatasetFilesAreHashedAndNonRegularFilesRefused) {
  KVB_REQUIRE_TEST_DATA("models/stories260K-hf/model.safetensors");
  auto in = kvb::cli::model_inputs(kModelSrc);
  std::vector<std::string> names;
  for (const auto& f : in) {
    names.push_back(f.role + ":" + f.name);
    EXPECT_EQ(f.sha256, kvb::sha256_file(f.path)) << f.path;
    EXPECT_EQ(f.bytes, static_cast<int64_t>(fs::file_size(f.path))) << f.path;
    EXPECT_EQ(f.owner, kModelSrc);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"weights:model.safetensors", "config:config.json", "config:generation_config.json",
                                      "tokenizer:tokenizer.json", "tokenizer:tokenizer_config.json"}));
  EXPECT_EQ(kvb::cli::combined_sha256({in.front()}), in.front().sha256);
  EXPECT_EQ(kvb::cli::combined_sha256({in[0], in[1]}), kvb::sha256_hex(in[0].sha256 + in[1].sha256));
  EXPECT_TRUE(kvb::test::error_has([] { kvb::cli::hash_input_file("/dev/zero"); }, {"/dev/zero: not a regular file"}));
  EXPECT_TRUE(kvb::test::error_has([] { kvb::cli::hash_input_file("/nonexistent/x"); }, {"/nonexistent/x: not found"}));
}
