#include "datasets/registry.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "datasets/hub.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb::datasets {

namespace {

const char* kLongProcCommit = "78e873ae395e42625fba7942bbb92713de08b2a6";

std::vector<SourceFile> build() {
  std::vector<SourceFile> v;
  // Math (GitHub copies preferred: JSONL, pinned commits; HF copies are parquet).
  v.push_back({"gsm8k/test.jsonl", "gsm8k", "github", "openai/grade-school-math",
               "3101c7d5072418e28b9008a6636bde82a006892c", "grade_school_math/data/test.jsonl", "jsonl",
               "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", 749738,
               "V; HF openai/gsm8k is parquet only"});
  v.push_back({"math500/test.jsonl", "math500", "hf-dataset", "HuggingFaceH4/MATH-500", "main", "test.jsonl", "jsonl",
               "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132", 446564,
               "V (= prm800k math_splits/test.jsonl LFS oid; byte identity with HF main is U)"});
  v.push_back({"aime24/test.jsonl", "aime24", "github", "QwenLM/Qwen2.5-Math",
               "a45202bd16f1ec06f433442dc1152d0074773465", "evaluation/data/aime24/test.jsonl", "jsonl",
               "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac", 156944, "V"});
  v.push_back({"aime25/test.jsonl", "aime25", "github", "inclusionAI/AReaL", "ea12141f2b18fbcd130c6460e8a141c1913354de",
               "evaluation/data/aime25/test.jsonl", "jsonl",
               "b4e273c02d3e7fe1b74b59eae768fc8230bfb0f79539890cb56f4361caac0331", 15813,
               "V; removed from AReaL HEAD, pinned"});
  // LongProc (GitHub main @78e873a).
  struct LP {
    const char* file;
    const char* sha;
    uint64_t size;
  };
  const LP lp[] = {
      {"html_to_tsv/html_to_tsv_0.5k.json", "ca81580b39201ebf4705c089f2524b6026d39d07a6b86c0e26a3d5ba0615a881", 193576},
      {"html_to_tsv/html_to_tsv_2k.json", "8e254c7a1c49285798c0dce083d71394ef4063fc5f7e7db18e410659f5ae3889", 873029},
      {"html_to_tsv/html_to_tsv_8k.json", "78f24dbdfcbab6188e7aa027b58a2c79da8ab7adb7d1df2a24799538a01364f4", 1529298},
      {"html_to_tsv/prompts.yaml", "1192cf2432084b49aff6ec8e0f1ed4f8b56f926826849041711b3733d2fe4dbb", 2116},
      {"pseudo_to_code/pseudo_to_code_0.5k.json", "d904c8b5f0898ea6eb17d7df420f17167d9b76f12cfeb88218095044e028bdbf",
       855459},
      {"pseudo_to_code/pseudo_to_code_2k.json", "2e19e3503000f2d76c1da123319ceb8474d07edf5ed92386d34e0b562759053f",
       1810589},
      {"pseudo_to_code/prompts.yaml", "d0739b6becb28c16fad99291f9b32e15bdba7aaf5ef21f789d414ee947c22b16", 937},
      {"path_traversal/path_traversal_0.5k.json", "8abd1e2f437b8799d697f33cddbbfdbb1eb80ebe9acbb4736bd5de5d8a28fcb7",
       2114865},
      {"path_traversal/path_traversal_2k.json", "", 0},
      {"path_traversal/path_traversal_8k.json", "", 0},
      {"path_traversal/prompts.yaml", "8625b1fe0c77b667b20bb2533b4116192f47aafb9069b0aa2295adb46cc7d685", 2839},
      {"tom_tracking/tom_tracking_0.5k.json", "1471e084234821c22f01b22818e0d185d33b717f6ac57505c98bc8b422607b6f", 696403},
      {"tom_tracking/tom_tracking_2k.json", "c7a03d3b71ad6b6a6eec45a7dc86cf911d8786541bce4884f4b6a4308bcf6e76", 2298845},
      {"tom_tracking/tom_tracking_8k.json", "", 0},
      {"tom_tracking/prompts.yaml", "1a15f592f722eea0e2e8622de960ea38ee4b594d09a58ecd91704f34db56908b", 8272},
      {"countdown/countdown_0.5k.json", "2f0d1095158bcd87e955970cdabbff217dd1493b3e3d4a6439ffe631008965b8", 296814},
      {"countdown/countdown_2k.json", "5dbc0320e3fc55ba5627b26a90f8c64a6f0bc44e350b065c6c5da620f9675a43", 1057377},
      {"countdown/countdown_8k.json", "d026d94ffdc3669396502c8586b812c2f9944365ca538c7ad5dfaad72613938f", 3606410},
      {"countdown/prompts.yaml", "ac6193f0168e5081343dc1fc8a79078281ddc33b27e7c5729826db1f6aefc396", 2163},
      {"travel_planning/travel_planning_all.json", "", 0},
      {"travel_planning/travel_planning_icl_examples.json",
       "f8a68e4216d0fac50bafe01dc230170621a554ebfb043adbd0afd8f0271cf8b8", 9600},
      {"travel_planning/prompts.yaml", "69c73829e2677830af5320815c95378b5ae64b725a93f00699a45337cec21ddc", 4024},
  };
  for (const auto& f : lp) {
    bool missing = f.size == 0;
    v.push_back({std::string("longproc/") + f.file, "longproc", "github", "princeton-pli/LongProc", kLongProcCommit,
                 std::string("data/") + f.file,
                 std::string(f.file).find(".yaml") != std::string::npos ? "yaml" : "json", f.sha, f.size,
                 missing ? "not in the verified snapshot (no sha256 known): fetched unpinned from the same commit; "
                           "or use HF rows under longproc/hf/"
                         : "V"});
  }
  for (const char* c :
       {"path_traversal_2k", "path_traversal_8k", "tom_tracking_8k", "travel_planning_2k", "travel_planning_8k"})
    v.push_back({std::string("longproc/hf/") + c + ".jsonl", "longproc", "derived", "PrincetonPLI/LongProc", "main",
                 std::string(c) + "/test-00000-of-00001.parquet", "jsonl", "", 0,
                 "HF parquet converted to JSONL rows {id,input_prompt,reference_output,metadata} (no parquet reader)"});
  // LongMemEval (cleaned release).
  for (const char* f : {"longmemeval_oracle.json", "longmemeval_s_cleaned.json", "longmemeval_m_cleaned.json"})
    v.push_back({std::string("longmemeval/") + f, "longmemeval", "hf-dataset", "xiaowu0162/longmemeval-cleaned", "main",
                 f, "json", "", 0, "one JSON array of 500 questions (M: ~2.75 GB, streamed)"});
  // SCBench raw JSONL.
  for (const char* t : {"choice_eng", "kv", "many_shot", "mf", "prefix_suffix", "qa_chn", "qa_eng", "repoqa",
                        "repoqa_and_kv", "summary", "summary_with_needles", "vt"})
    v.push_back({std::string("scbench/scbench_") + t + ".jsonl", "scbench", "hf-dataset", "microsoft/SCBench", "main",
                 std::string("data/scbench_") + t + ".jsonl", "jsonl", "", 0, "P"});
  // LongBench v1: data.zip holds data/<task>.jsonl and data/<task>_e.jsonl; the tasks read the
  // members in place (datasets/zip_archive.h) unless an extracted longbench/data/ exists.
  v.push_back({"longbench/data.zip", "longbench", "hf-dataset", "THUDM/LongBench", "main", "data.zip", "zip", "", 0,
               "114 MB (P); members data/<task>.jsonl are read from the zip in place (no unzip needed)"});
  v.push_back({"longbench_v2/data.json", "longbench_v2", "hf-dataset", "THUDM/LongBench-v2", "main", "data.json",
               "json", "", 0, "465 MB (P), one JSON array of 503 objects"});
  return v;
}

}  // namespace

namespace {
std::deque<SourceFile>& table() {
  static std::deque<SourceFile> v = [] {
    std::vector<SourceFile> b = build();
    return std::deque<SourceFile>(b.begin(), b.end());
  }();
  return v;
}
std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

const std::deque<SourceFile>& sources() { return table(); }

void add_sources(const std::vector<SourceFile>& files) {
  std::lock_guard<std::mutex> lock(table_mutex());
  auto& t = table();
  for (const auto& f : files) {
    const SourceFile* have = nullptr;
    for (const auto& s : t)
      if (s.key == f.key) have = &s;
    if (!have) {
      t.push_back(f);
      continue;
    }
    if (have->repo != f.repo || have->revision != f.revision || have->path != f.path || have->host != f.host)
      fail("{}: registered twice with different sources ({} {}@{} and {} {}@{})", f.key, have->host, have->repo,
           have->revision, f.host, f.repo, f.revision);
  }
}

const SourceFile* find_source(const std::string& key) {
  for (const auto& s : sources())
    if (s.key == key) return &s;
  return nullptr;
}

std::string source_url(const SourceFile& f, const std::string& hf_endpoint) {
  if (f.host == "github") return "https://raw.githubusercontent.com/" + f.repo + "/" + f.revision + "/" + f.path;
  if (f.host == "hf-dataset") return hf_endpoint + "/datasets/" + f.repo + "/resolve/" + f.revision + "/" + f.path;
  if (f.host == "hf-model") return hf_endpoint + "/" + f.repo + "/resolve/" + f.revision + "/" + f.path;
  fail("{}: no download URL ({})", f.key, f.note);
}

DataLocator::DataLocator(std::vector<std::string> data_dirs, HubClient* hub) : dirs_(std::move(data_dirs)), hub_(hub) {}

std::string DataLocator::locate(const std::string& key) const {
  namespace fs = std::filesystem;
  for (const auto& d : dirs_) {
    fs::path p = fs::path(d) / key;
    if (file_exists(p.string())) return p.string();
  }
  const SourceFile* src = find_source(key);
  if (src && hub_ && src->host == "hf-dataset") {
    return hub_->download({RepoType::kDataset, src->repo, src->revision, src->path});
  }
  std::string dirs;
  for (const auto& d : dirs_) dirs += (dirs.empty() ? "" : ", ") + d;
  std::string how =
      src ? (src->host == "derived" ? src->note : "run `kvbench datasets fetch " + src->benchmark + " --data-dir DIR`")
          : "not a registered benchmark file";
  throw Error(fmt::format("{}: not found in data directories [{}]; {}", key, dirs.empty() ? "none" : dirs, how));
}

std::vector<std::string> default_data_dirs() {
  std::vector<std::string> out;
  if (const char* e = std::getenv("KVB_DATA_DIR")) {
    std::string s = e;
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t c = s.find(':', pos);
      std::string part = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
      if (!part.empty()) out.push_back(part);
      if (c == std::string::npos) break;
      pos = c + 1;
    }
  }
  return out;
}

}  // namespace kvb::datasets
