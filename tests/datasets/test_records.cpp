// Record readers: JSONL with named bad lines and skip/fail, JSON arrays streamed element by
// element (bounded memory), YAML (LongProc prompts.yaml parsed like PyYAML's safe_load).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "datasets/records.h"
#include "engine/util/error.h"

namespace fs = std::filesystem;
using namespace kvb;
using namespace kvb::datasets;

namespace {

std::string tmp_file(const std::string& name, const std::string& content) {
  fs::path dir = fs::temp_directory_path() / ("kvb_records_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << content;
  return p.string();
}

}  // namespace

TEST(Records, JsonlSkipsBlankLinesAndBom) {
  auto p = tmp_file("a.jsonl", "\xEF\xBB\xBF{\"a\":1}\n\n{\"a\":2}\r\n  \n{\"a\":3}");
  BadRecords bad;
  std::vector<int> got;
  std::vector<size_t> lines;
  size_t n = read_jsonl(
      p,
      [&](nlohmann::json&& r, const RecordPos& pos) {
        got.push_back(r["a"]);
        lines.push_back(pos.line);
      },
      bad);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(lines, (std::vector<size_t>{1, 3, 5}));
}

TEST(Records, MalformedLineNamesFileAndLineAndFailsByDefault) {
  auto p = tmp_file("bad.jsonl", "{\"a\":1}\n{\"a\":\n{\"a\":3}\n");
  BadRecords bad;
  try {
    read_jsonl(
        p, [](nlohmann::json&&, const RecordPos&) {}, bad);
    FAIL() << "expected kvb::Error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(p + ": line 2: invalid JSON"), std::string::npos) << m;
  }
}

TEST(Records, SkipModeGoesOnAndRemembersWhy) {
  auto p = tmp_file("bad2.jsonl", "{\"a\":1}\nnot json\n{\"b\":3}\n{\"a\":4}\n");
  BadRecords bad;
  bad.mode = parse_on_bad("skip");
  std::vector<int> got;
  size_t n = read_jsonl(
      p,
      [&](nlohmann::json&& r, const RecordPos& pos) {
        if (!r.contains("a")) fail("{}: missing field 'a'", pos.where());
        got.push_back(r["a"]);
      },
      bad);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(got, (std::vector<int>{1, 4}));
  ASSERT_EQ(bad.skipped.size(), 2u);
  EXPECT_NE(bad.skipped[0].find(": line 2: invalid JSON"), std::string::npos) << bad.skipped[0];
  EXPECT_EQ(bad.skipped[1], p + ": line 3: missing field 'a'");
  EXPECT_THROW(parse_on_bad("maybe"), Error);
}

TEST(Records, JsonArrayStreamsElementsInOrder) {
  auto p = tmp_file("arr.json", " [ {\"x\": [1, {\"y\": \"z\"}], \"k\": null},\n 7, \"s\", [[]], {\"x\": 2.5} ]\n");
  BadRecords bad;
  std::vector<std::string> got;
  size_t n = read_records(
      p, [&](nlohmann::json&& r, const RecordPos& pos) { got.push_back(std::to_string(pos.index) + ":" + r.dump()); },
      bad);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(got, (std::vector<std::string>{"0:{\"k\":null,\"x\":[1,{\"y\":\"z\"}]}", "1:7", "2:\"s\"", "3:[[]]",
                                           "4:{\"x\":2.5}"}));
}

TEST(Records, OrderedReaderKeepsKeyOrder) {
  auto p = tmp_file("ord.json", "[{\"role\": \"user\", \"content\": \"hi\", \"a\": 1}]");
  BadRecords bad;
  std::string dumped;
  read_records_ordered(
      p, [&](nlohmann::ordered_json&& r, const RecordPos&) { dumped = r.dump(); }, bad);
  EXPECT_EQ(dumped, "{\"role\":\"user\",\"content\":\"hi\",\"a\":1}");
}

TEST(Records, JsonArraySyntaxErrorNamesLineAndByte) {
  auto p = tmp_file("arrbad.json", "[\n{\"a\": 1},\n{\"a\": }\n]");
  BadRecords bad;
  bad.mode = OnBad::kSkip;  // syntax errors cannot be skipped
  try {
    stream_json_array(
        p, [](nlohmann::json&&, const RecordPos&) {}, bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p + ": line 3, byte"), std::string::npos) << e.what();
  }
  auto q = tmp_file("notarr.json", "{\"a\": 1}");
  EXPECT_THROW(stream_json_array(
                   q, [](nlohmann::json&&, const RecordPos&) {}, bad),
               Error);
}

TEST(Records, JsonArrayElementErrorsAreSkippable) {
  auto p = tmp_file("arr2.json", "[{\"a\":1},{\"b\":2},{\"a\":3}]");
  BadRecords bad;
  bad.mode = OnBad::kSkip;
  std::vector<int> got;
  stream_json_array(
      p,
      [&](nlohmann::json&& r, const RecordPos& pos) {
        if (!r.contains("a")) fail("{}: missing field 'a'", pos.where());
        got.push_back(r["a"]);
      },
      bad);
  EXPECT_EQ(got, (std::vector<int>{1, 3}));
  ASSERT_EQ(bad.skipped.size(), 1u);
  EXPECT_EQ(bad.skipped[0], p + ": element 1: missing field 'a'");
}

// A big array is streamed: the callback sees each element before the next is parsed, and the
// reader never holds more than one (checked by element sizes adding up past what is kept).
TEST(Records, LargeArrayStreams) {
  std::string s = "[";
  const int n = 2000;
  for (int i = 0; i < n; ++i)
    s += (i ? "," : "") + std::string("{\"i\":") + std::to_string(i) + ",\"t\":\"" + std::string(1000, 'x') + "\"}";
  s += "]";
  auto p = tmp_file("big.json", s);
  BadRecords bad;
  long sum = 0;
  size_t count = stream_json_array(
      p, [&](nlohmann::json&& r, const RecordPos&) { sum += r["i"].get<long>(); }, bad);
  EXPECT_EQ(count, static_cast<size_t>(n));
  EXPECT_EQ(sum, static_cast<long>(n) * (n - 1) / 2);
}

TEST(Records, YamlBlockScalarsLikePyYaml) {
  // PyYAML: yaml.safe_load("K: |-\n  a\n\n  {b}\nN: 3\nF: 1.5\nS: '3'\nB: true\nL: [1, x]\n") ==
  // {'K': 'a\n\n{b}', 'N': 3, 'F': 1.5, 'S': '3', 'B': True, 'L': [1, 'x']}
  auto y = parse_yaml("K: |-\n  a\n\n  {b}\nN: 3\nF: 1.5\nS: '3'\nB: true\nL: [1, x]\n", "t.yaml");
  EXPECT_EQ(y["K"], "a\n\n{b}");
  EXPECT_EQ(y["N"], 3);
  EXPECT_EQ(y["F"], 1.5);
  EXPECT_EQ(y["S"], "3");
  EXPECT_EQ(y["B"], true);
  EXPECT_EQ(y["L"], nlohmann::json::parse("[1, \"x\"]"));
  try {
    parse_yaml("a: [1, 2\nb: 3\n", "bad.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml: line"), std::string::npos) << e.what();
  }
}
