// A model directory written by current transformers' save_pretrained (model.safetensors,
// config.json, generation_config.json, tokenizer.json, tokenizer_config.json and
// chat_template.jinja — the template is NOT in tokenizer_config.json) chats byte for byte as
// transformers: 5 prompts × 80 greedy tokens through `kvbench generate --chat`
// (goldens: tools/gen_hf_dir_goldens.py → tests/fixtures/hf_dir/smollm2).
//
// The directory is the default model, SmolLM2-135M-Instruct Q4_1, dequantised by transformers
// (gguf-py) and saved. Its 540 MB model.safetensors is not committed: this test rebuilds it from
// the same GGUF with kvbench's own GGUF loader (rebuild_safetensors below) and first proves the
// rebuilt file holds exactly the bytes transformers wrote, tensor by tensor (sha256 of each
// tensor against weights_manifest.json). The default model is a prerequisite of the suite
// (bootstrap.sh fetches it): when it is absent this test FAILS, it does not skip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/util/hash.h"
#include "engine/model/gguf.h"
#include "engine/util/io.h"
#include "harness/model_source.h"
#include "tests/support/test_support.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = test::fixture("hf_dir/smollm2");

/// Writes `dir`/model.safetensors from the GGUF at `gguf`, loaded by kvbench (dequantised to f32,
/// Hugging Face names and layouts), holding exactly the tensors of `manifest` in its order, F32.
/// Returns, per tensor, "" when its bytes have the manifest's sha256, else a description.
std::vector<std::string> rebuild_safetensors(const std::string& gguf, const nlohmann::json& manifest,
                                             const std::string& dir) {
  GgufModel g = load_gguf(gguf);
  std::vector<std::string> problems;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<std::vector<float>> data;  // each tensor dequantised, rows in Hugging Face order
  uint64_t off = 0;
  for (const auto& t : manifest["tensors"]) {
    const std::string name = t["name"];
    const TensorView* v = g.weights.find(name);
    if (!v) {
      problems.push_back(name + ": not in kvbench's GGUF weights");
      continue;
    }
    if (v->shape != t["shape"].get<std::vector<int64_t>>()) {
      problems.push_back(name + ": shape differs");
      continue;
    }
    // GGUF tensors stay in the file's type; to_f32 dequantises them and undoes llama's Q/K row
    // order, as a load with f32 weights does.
    std::vector<float> f = WeightStore::to_f32(*v);
    const size_t nbytes = f.size() * sizeof(float);
    const std::string bytes(reinterpret_cast<const char*>(f.data()), nbytes);
    if (kvb::sha256_hex(bytes) != t["sha256"].get<std::string>()) problems.push_back(name + ": bytes differ");
    header[name] = {{"dtype", "F32"}, {"shape", v->shape}, {"data_offsets", {off, off + nbytes}}};
    off += nbytes;
    data.push_back(std::move(f));
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  const uint64_t hl = h.size();
  out.write(reinterpret_cast<const char*>(&hl), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& f : data)
    out.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size() * sizeof(float)));
  if (!out) problems.push_back("writing " + dir + "/model.safetensors failed");
  return problems;
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

TEST(HfDirChat, TransformersSavedDirectoryChatsByteForByteAsTransformers) {
  const std::string gguf = cli::default_model_path();
  ASSERT_TRUE(file_exists(gguf)) << "the default model is missing: " << gguf
                                 << " (bootstrap.sh / tools/fetch_default_model.sh fetch it)";
  const nlohmann::json manifest = parse_json_file(kFixture + "/weights_manifest.json");
  ASSERT_EQ(kvb::sha256_file(gguf), manifest["source_gguf_sha256"].get<std::string>())
      << "the default model is not the file the goldens were made from";
  const nlohmann::json gold = parse_json_file(kFixture + "/goldens.json");

  // The directory as transformers saved it: the committed files + the rebuilt weights.
  const fs::path dir = fs::temp_directory_path() / ("kvb_hf_dir_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kFixture)) {
    const std::string n = e.path().filename().string();
    if (n != "goldens.json" && n != "weights_manifest.json") fs::copy_file(e.path(), dir / n);
  }
  ASSERT_TRUE(fs::exists(dir / "chat_template.jinja"));
  ASSERT_FALSE(parse_json_file((dir / "tokenizer_config.json").string()).contains("chat_template"));
  const std::vector<std::string> problems = rebuild_safetensors(gguf, manifest, dir.string());
  ASSERT_TRUE(problems.empty()) << problems.size() << " tensors differ from transformers', first: " << problems[0];

  ASSERT_EQ(gold["cases"].size(), 5u);
  for (const auto& c : gold["cases"]) {
    const std::string prompt = c["prompt"];
    SCOPED_TRACE(prompt);
    const std::string out_file = (dir / "stdout.txt").string(), err_file = (dir / "stderr.txt").string();
    const std::string cmd = std::string(KVB_BINARY) + " generate --model " + shell_quote(dir.string()) +
                            " --chat --temperature 0 --max-new-tokens " +
                            std::to_string(gold["max_new_tokens"].get<int>()) + " --prompt " + shell_quote(prompt) +
                            " > " + out_file + " 2> " + err_file;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(err_file);
    EXPECT_EQ(read_file(out_file), c["text"].get<std::string>() + "\n");
    // The same prompt tokens (the chat template from chat_template.jinja, rendered and tokenized).
    const std::string err = read_file(err_file);
    EXPECT_NE(err.find("prompt " + std::to_string(c["prompt_ids"].size()) + " tokens"), std::string::npos) << err;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvb
