// ZIP members read in place (datasets/zip_archive.h): the committed fixture archive written by
// Python's zipfile (tools/gen_travel_zip_fixtures.py) must give byte-identical members and the same
// records as the extracted JSONL files; an archive written here with libzip checks large members
// and chunking; corrupt, truncated and non-ZIP files and missing members give one kvb::Error
// naming the archive (and the member).
#include <unistd.h>
#include <zip.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "datasets/records.h"
#include "datasets/zip_archive.h"
#include "engine/util/error.h"
#include "tests/support/test_support.h"

namespace fs = std::filesystem;
using namespace kvb;
using namespace kvb::datasets;

namespace {

const std::string kFixtureZip = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/longbench_zip/longbench/data.zip";
const std::string kExtracted = std::string(KVB_SOURCE_DIR) + "/tests/fixtures/datasets/longbench/data";

fs::path tmp_dir() {
  fs::path d = fs::temp_directory_path() / ("kvb_zip_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

using ::kvb::test::error_of;

std::vector<std::pair<nlohmann::json, size_t>> jsonl_of_file(const std::string& p) {
  std::vector<std::pair<nlohmann::json, size_t>> out;
  BadRecords bad;
  read_jsonl(
      p, [&](nlohmann::json&& r, const RecordPos& pos) { out.emplace_back(std::move(r), pos.line); }, bad);
  return out;
}

// Writes `members` (name → bytes, deflated) into a new archive with libzip.
void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members) {
  fs::remove(path);
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_EXCL, &err);
  ASSERT_NE(z, nullptr) << err;
  for (const auto& [name, data] : members) {
    zip_source_t* src = zip_source_buffer(z, data.data(), data.size(), 0);
    ASSERT_NE(src, nullptr);
    zip_int64_t idx = zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE);
    ASSERT_GE(idx, 0) << zip_strerror(z);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), ZIP_CM_DEFLATE, 9);
  }
  ASSERT_EQ(zip_close(z), 0);  // the buffers are read here, while `members` is alive
}

}  // namespace

TEST(Zip, PythonWrittenArchiveMembersEqualTheExtractedFiles) {
  ZipArchive z(kFixtureZip);
  auto names = z.members();
  ASSERT_EQ(names.size(), 8u);
  EXPECT_EQ(names[0], "data/");
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(kExtracted)) {
    std::string member = "data/" + e.path().filename().string();
    ASSERT_TRUE(z.has(member)) << member;
    std::string want = slurp(e.path().string());
    EXPECT_EQ(z.size_of(member), want.size()) << member;
    EXPECT_EQ(z.read_all(member), want) << member;
    std::string chunked;
    z.read(
        member,
        [&](const char* d, size_t n) {
          EXPECT_LE(n, 7u);
          chunked.append(d, n);
        },
        7);
    EXPECT_EQ(chunked, want) << member;
    ++files;
  }
  EXPECT_EQ(files, 7u);
  EXPECT_FALSE(z.has("data/qasper.jsonl"));
  EXPECT_FALSE(z.has("hotpotqa.jsonl"));  // exact names only
}

TEST(Zip, JsonlMemberGivesTheRecordsOfTheExtractedFile) {
  for (const char* name : {"hotpotqa.jsonl", "trec.jsonl", "multifieldqa_zh.jsonl"}) {
    auto want = jsonl_of_file(kExtracted + "/" + name);
    std::vector<std::pair<nlohmann::json, size_t>> got;
    std::vector<std::string> files;
    BadRecords bad;
    size_t n = read_jsonl_zip(
        kFixtureZip, std::string("data/") + name,
        [&](nlohmann::json&& r, const RecordPos& pos) {
          got.emplace_back(std::move(r), pos.line);
          files.push_back(pos.file);
        },
        bad);
    EXPECT_EQ(n, want.size()) << name;
    EXPECT_EQ(got, want) << name;
    for (const auto& f : files) EXPECT_EQ(f, kFixtureZip + "!data/" + name);
  }
}

TEST(Zip, LargeMemberStreamsInChunksWithJsonlRules) {
  // 40,000 lines (> 1 MiB, several read chunks), a BOM, CRLF, blank lines and no final newline.
  std::string big = "\xEF\xBB\xBF";
  for (int i = 0; i < 40000; ++i) {
    big += "{\"i\": " + std::to_string(i) + ", \"pad\": \"" + std::string(i % 13, 'x') + "\"}";
    big += (i % 3 == 0) ? "\r\n" : "\n";
    if (i % 1000 == 0) big += "\n";
  }
  big.pop_back();
  ASSERT_GT(big.size(), size_t{1} << 20);
  std::string path = (tmp_dir() / "big.zip").string();
  std::string plain = (tmp_dir() / "big.jsonl").string();
  spit(plain, big);
  write_zip(path, {{"data/big.jsonl", big}, {"other.txt", "hello"}});
  auto want = jsonl_of_file(plain);
  ASSERT_EQ(want.size(), 40000u);
  std::vector<std::pair<nlohmann::json, size_t>> got;
  BadRecords bad;
  EXPECT_EQ(read_jsonl_zip(
                path, "data/big.jsonl",
                [&](nlohmann::json&& r, const RecordPos& pos) { got.emplace_back(std::move(r), pos.line); }, bad),
            40000u);
  EXPECT_EQ(got, want);
  EXPECT_EQ(ZipArchive(path).read_all("other.txt"), "hello");

  // The incremental parser does not depend on how the bytes are split.
  std::vector<std::pair<nlohmann::json, size_t>> bytewise;
  JsonlStream s(
      "mem", [&](nlohmann::json&& r, const RecordPos& pos) { bytewise.emplace_back(std::move(r), pos.line); }, bad);
  for (size_t i = 0; i < 5000; ++i) s.feed(big.data() + i, 1);
  s.feed(big.data() + 5000, big.size() - 5000);
  EXPECT_EQ(s.finish(), 40000u);
  EXPECT_EQ(bytewise, want);
}

TEST(Zip, BadLineInMemberNamesArchiveMemberAndLine) {
  std::string path = (tmp_dir() / "badline.zip").string();
  write_zip(path, {{"data/x.jsonl", "{\"a\": 1}\n{\"a\": \n{\"a\": 3}\n"}});
  BadRecords fail_mode;
  std::string m = error_of([&] {
    read_jsonl_zip(
        path, "data/x.jsonl", [](nlohmann::json&&, const RecordPos&) {}, fail_mode);
  });
  EXPECT_NE(m.find(path + "!data/x.jsonl: line 2: invalid JSON"), std::string::npos) << m;
  BadRecords skip;
  skip.mode = OnBad::kSkip;
  EXPECT_EQ(read_jsonl_zip(
                path, "data/x.jsonl", [](nlohmann::json&&, const RecordPos&) {}, skip),
            2u);
  ASSERT_EQ(skip.skipped.size(), 1u);
}

TEST(Zip, MissingMemberNamesArchiveAndMember) {
  ZipArchive z(kFixtureZip);
  std::string m = error_of([&] { z.read_all("data/qasper.jsonl"); });
  EXPECT_NE(m.find(kFixtureZip + ": member 'data/qasper.jsonl' not found"), std::string::npos) << m;
  EXPECT_NE(m.find("8 members"), std::string::npos) << m;
  m = error_of([&] { z.size_of("nope"); });
  EXPECT_NE(m.find("member 'nope' not found"), std::string::npos) << m;
  BadRecords bad;
  m = error_of([&] {
    read_jsonl_zip(
        kFixtureZip, "data/qasper.jsonl", [](nlohmann::json&&, const RecordPos&) {}, bad);
  });
  EXPECT_NE(m.find("data/qasper.jsonl"), std::string::npos) << m;
}

TEST(Zip, TruncatedGarbageAndMissingArchivesAreOneClearError) {
  std::string bytes = slurp(kFixtureZip);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 10, size_t{0}}) {
    std::string p = (tmp_dir() / ("trunc_" + std::to_string(keep) + ".zip")).string();
    spit(p, bytes.substr(0, keep));
    std::string m = error_of([&] { ZipArchive z(p); });
    EXPECT_NE(m.find(p + ": not a readable ZIP archive"), std::string::npos) << keep << ": " << m;
  }
  std::string g = (tmp_dir() / "garbage.zip").string();
  spit(g, std::string(5000, '\x5a'));
  std::string m = error_of([&] { ZipArchive z(g); });
  EXPECT_NE(m.find(g + ": not a readable ZIP archive"), std::string::npos) << m;
  std::string none = (tmp_dir() / "absent.zip").string();
  try {
    ZipArchive z(none);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(none + ": cannot open ZIP archive"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 1);
  }
}

TEST(Zip, CorruptMemberDataNamesArchiveAndMember) {
  std::string bytes = slurp(kFixtureZip);
  // Locate data/hotpotqa.jsonl's local header (PK\3\4) and damage its compressed data.
  const std::string name = "data/hotpotqa.jsonl";
  size_t hdr = bytes.find("PK\x03\x04", 0);
  size_t data_at = std::string::npos;
  while (hdr != std::string::npos) {
    auto u16 = [&](size_t o) {
      return static_cast<size_t>(static_cast<uint8_t>(bytes[o]) | (static_cast<uint8_t>(bytes[o + 1]) << 8));
    };
    size_t nlen = u16(hdr + 26), xlen = u16(hdr + 28);
    if (bytes.compare(hdr + 30, nlen, name) == 0) {
      data_at = hdr + 30 + nlen + xlen;
      break;
    }
    hdr = bytes.find("PK\x03\x04", hdr + 4);
  }
  ASSERT_NE(data_at, std::string::npos);
  std::string bad = bytes;
  for (size_t i = 4; i < 40; ++i) bad[data_at + i] = static_cast<char>(bad[data_at + i] ^ 0x5a);
  std::string p = (tmp_dir() / "corrupt_member.zip").string();
  spit(p, bad);
  ZipArchive z(p);                                                              // the directory is intact
  EXPECT_EQ(z.read_all("data/trec.jsonl"), slurp(kExtracted + "/trec.jsonl"));  // other members still read
  std::string m = error_of([&] { z.read_all(name); });
  EXPECT_NE(m.find(p + ": member '" + name + "': corrupt data"), std::string::npos) << m;
  BadRecords br;
  m = error_of([&] {
    read_jsonl_zip(
        p, name, [](nlohmann::json&&, const RecordPos&) {}, br);
  });
  // Either the CRC/inflate error or a garbled line decoded before it: both name archive and member.
  EXPECT_NE(m.find(p), std::string::npos) << m;
  EXPECT_NE(m.find(name), std::string::npos) << m;
}
