// The store's side of the LLM judge: the v1 -> v2 migration (judge_cache.template, the ungraded
// index) on a database written by schema v1, the judge cache round trip with its template, and
// to_grade_failed (what `kvbench grade --retry-failed` re-grades).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <set>

#include "engine/util/error.h"
#include "results/schema.h"
#include "results/store.h"
#include "synth.h"

using namespace kvb::results;
using namespace kvb::results::testing;

namespace {

// Writes a database exactly as a schema-v1 kvbench did: migration 0, user_version 1, and one
// judge verdict in its 6-column judge_cache.
void write_v1_db(const std::string& path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
  };
  exec("BEGIN");
  exec(migrations().at(0));
  exec("PRAGMA application_id = " + std::to_string(Store::kApplicationId));
  exec("INSERT INTO judge_cache VALUES ('k-old', 'openai:gpt-4o', '{}', 'Yes', 1.0, '2026-01-01T00:00:00Z')");
  exec("PRAGMA user_version = 1");
  exec("COMMIT");
  sqlite3_close(db);
}

}  // namespace

TEST(JudgeStore, V1DatabaseMigratesKeepingItsVerdicts) {
  ASSERT_GE(migrations().size(), 2u);
  auto p = temp_db("judge_v1");
  write_v1_db(p);
  // A read-only open of the old file refuses (it would need the migration).
  EXPECT_THROW({ Store ro(p, Store::Mode::kReadOnly); }, kvb::Error);
  Store s(p);
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  EXPECT_GE(Store::kSchemaVersion, 2);
  auto e = s.judge_get("k-old");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->judge_model, "openai:gpt-4o");
  EXPECT_EQ(e->response, "Yes");
  EXPECT_EQ(*e->score, 1.0);
  EXPECT_EQ(e->template_name, "");  // unknown for verdicts cached before v2
  EXPECT_EQ(s.query("SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name='grades_ungraded'")[0][0], "1");

  JudgeEntry n;
  n.judge_key = "k-new";
  n.judge_model = "local:m";
  n.request = "{\"model\":\"m\"}";
  n.response = "no";
  n.score = 0.0;
  n.template_name = "knowledge-update";
  s.judge_put(n);
  auto back = s.judge_get("k-new");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->template_name, "knowledge-update");
  EXPECT_EQ(*back->score, 0.0);
  EXPECT_FALSE(s.judge_get("k-missing"));
}

TEST(JudgeStore, ToGradeFailedSelectsUngradedRowsOnly) {
  auto p = temp_db("judge_failed");
  Store s(p);
  auto items = expand_grid(small_grid(3, 2));  // 30 items, all graded by fill()
  int64_t run = fill(s, items, run_info());
  EXPECT_TRUE(s.to_grade_failed(run).empty());

  // Three judgments failed; one more sample failed to generate (nothing to re-grade there).
  std::vector<GradeRecord> failed;
  for (int i : {2, 5, 7, 11}) {
    GradeRecord g;
    g.item_key = items[i].key;
    g.ungraded = true;
    g.reason = "judge openai:m: HTTP 500: down (gave up after 6 attempts)";
    failed.push_back(g);
  }
  s.write_grades(run, failed);
  s.exec("UPDATE generations SET finish_reason = 'error: prompt too long' WHERE item_key = '" + items[11].key + "'");
  auto todo = s.to_grade_failed(run);
  ASSERT_EQ(todo.size(), 3u);
  std::set<std::string> keys;
  for (const auto& t : todo) {
    keys.insert(t.item.key);
    EXPECT_FALSE(t.text.empty());
  }
  EXPECT_EQ(keys, (std::set<std::string>{items[2].key, items[5].key, items[7].key}));
  EXPECT_EQ(s.to_grade_failed(std::nullopt).size(), 3u);
  EXPECT_TRUE(s.to_grade_failed(run + 1).empty());
  // Plain to_grade is unchanged: every generation has a grade row.
  EXPECT_TRUE(s.to_grade(run, false).empty());

  // Once re-graded with a verdict they are no longer selected.
  for (auto& g : failed) {
    g.ungraded = false;
    g.score = 1.0;
  }
  s.write_grades(run, failed);
  EXPECT_TRUE(s.to_grade_failed(run).empty());
}
