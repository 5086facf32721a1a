// bench_tokenizer: encoding speed of kvb::tok::Tokenizer on one core (a benchmark, not a test).
//
//   bench_tokenizer [TOKENIZER_JSON] [SECONDS]
//
// Defaults to the test data's tokenizers/qwen3/tokenizer.json (tests/data, unpacked into
// <build>/test-data) and 3 seconds. The corpus is the GSM8K test questions plus the LongProc HTML
// pages of the test data's datasets, concatenated into
// documents of ~8 KB. Prints characters (code points) and bytes encoded per second; the issue's
// target for Qwen3 is >= 1M characters/s. The BPE word cache is warm after the first pass,
// which is how a long benchmark run behaves too.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/util/io.h"

int main(int argc, char** argv) {
  const std::string data = KVB_TEST_DATA_DIR;
  const std::string path = argc > 1 ? argv[1] : data + "/tokenizers/qwen3/tokenizer.json";
  const double seconds = argc > 2 ? std::stod(argv[2]) : 3.0;
  try {
    const auto tok = kvb::tok::Tokenizer::from_file(path);
    std::vector<std::string> docs;
    std::string cur;
    auto add = [&](const std::string& s) {
      cur += s;
      if (cur.size() > 8192) {
        docs.push_back(std::move(cur));
        cur.clear();
      }
    };
    for (const std::string& line : {kvb::read_file(data + "/datasets/gsm8k/test.jsonl")}) {
      size_t pos = 0;
      while (pos < line.size()) {
        size_t nl = line.find('\n', pos);
        if (nl == std::string::npos) nl = line.size();
        if (nl > pos) add(nlohmann::json::parse(line.substr(pos, nl - pos))["question"].get<std::string>() + "\n");
        pos = nl + 1;
      }
    }
    std::vector<std::filesystem::path> pages;
    for (const auto& e : std::filesystem::directory_iterator(data + "/datasets/longproc/html_to_tsv/webpage"))
      pages.push_back(e.path());
    std::sort(pages.begin(), pages.end());
    for (size_t i = 0; i < pages.size() && i < 40; ++i) add(kvb::read_file(pages[i].string()));
    if (!cur.empty()) docs.push_back(cur);

    size_t bytes = 0, chars = 0, tokens = 0;
    for (const auto& d : docs) {
      bytes += d.size();
      for (unsigned char c : d) chars += (c & 0xC0) != 0x80;
    }
    for (const auto& d : docs) tokens += tok.encode(d).size();  // warm-up pass
    const auto t0 = std::chrono::steady_clock::now();
    size_t passes = 0;
    double elapsed = 0;
    do {
      for (const auto& d : docs) (void)tok.encode(d);
      ++passes;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    std::printf("%s\n  corpus: %zu docs, %zu bytes, %zu chars, %zu tokens\n", path.c_str(), docs.size(), bytes, chars,
                tokens);
    std::printf("  encode: %.2f M chars/s, %.2f MB/s, %.2f M tokens/s (%zu passes, %.2f s)\n",
                chars * passes / elapsed / 1e6, bytes * passes / elapsed / 1e6, tokens * passes / elapsed / 1e6, passes,
                elapsed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
