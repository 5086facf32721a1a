// Input identity of `kvbench run`: file hashes with a memo and a stat-keyed cache; see
// harness/input_identity.h.
#include "harness/input_identity.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "engine/util/hash.h"
#include "engine/util/io.h"
#include "harness/model_source.h"
#include "harness/run_grid.h"

namespace kvb::cli {

namespace {

struct Hashed {
  FileStat st;
  std::string sha256;
  bool cacheable = false;
};

/// The process's hashing state: the cache read from the DB, and what was hashed.
struct HashState {
  std::map<std::string, results::FileHash> cache;  // path -> cached entry
  std::map<std::string, Hashed> memo;              // path -> this process's hash
  HashCounters counters;
};

HashState& state() {
  static HashState s;
  return s;
}

int64_t ns_of(const struct timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }

/// The identity fields of `st` (device, inode, size, modification and change times in ns).
FileStat file_stat_of(const struct stat& st) {
  FileStat f;
  f.dev = static_cast<int64_t>(st.st_dev);
  f.inode = static_cast<int64_t>(st.st_ino);
  f.bytes = static_cast<int64_t>(st.st_size);
  f.mtime_ns = ns_of(st.st_mtim);
  f.ctime_ns = ns_of(st.st_ctim);
  return f;
}

int64_t now_ns() {
  struct timespec t {};
  clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

}  // namespace

FileStat stat_input_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) fail("{}: not found", path);
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)), ErrorKind::kRuntime);
  }
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  return file_stat_of(st);
}

bool hash_cacheable(const FileStat& before, const FileStat& after, int64_t start_ns) {
  return before == after && before.mtime_ns <= start_ns - kRacyWindowNs && before.ctime_ns <= start_ns - kRacyWindowNs;
}

void use_hash_cache(const std::string& db) {
  HashState& s = state();
  s.cache.clear();
  if (db.empty() || !file_exists(db)) return;
  try {
    results::Store store(db, results::Store::Mode::kReadOnly);
    for (const auto& row : store.query("SELECT path, dev, inode, bytes, mtime_ns, ctime_ns, sha256 FROM file_hashes")) {
      results::FileHash h;
      h.path = row.at(0);
      h.dev = std::stoll(row.at(1));
      h.inode = std::stoll(row.at(2));
      h.bytes = std::stoll(row.at(3));
      h.mtime_ns = std::stoll(row.at(4));
      h.ctime_ns = std::stoll(row.at(5));
      h.sha256 = row.at(6);
      s.cache[h.path] = h;
    }
  } catch (const std::exception&) {
    s.cache.clear();  // no cache: an older or bad database is dealt with (migrated or refused) when opened
  }
}

results::RunInput hash_input_file(const std::string& path) {
  HashState& s = state();
  results::RunInput r;
  r.path = path;
  auto m = s.memo.find(path);
  if (m == s.memo.end()) {
    const FileStat before = stat_input_file(path);
    Hashed h;
    h.st = before;
    auto c = s.cache.find(path);
    if (c != s.cache.end() && c->second.dev == before.dev && c->second.inode == before.inode &&
        c->second.bytes == before.bytes && c->second.mtime_ns == before.mtime_ns &&
        c->second.ctime_ns == before.ctime_ns && c->second.sha256.size() == 64) {
      h.sha256 = c->second.sha256;
      s.counters.bytes_from_cache += before.bytes;
    } else {
      const int64_t start = now_ns();
      h.sha256 = sha256_file(path);
      const FileStat after = stat_input_file(path);
      if (!(after == before))
        throw Error(fmt::format("{}: changed while it was being hashed; rerun when nothing writes to it", path),
                    ErrorKind::kRuntime);
      h.cacheable = hash_cacheable(before, after, start);
      s.counters.bytes_read += before.bytes;
    }
    m = s.memo.emplace(path, std::move(h)).first;
  }
  r.bytes = m->second.st.bytes;
  r.sha256 = m->second.sha256;
  return r;
}

void recheck_input_files() {
  for (const auto& [path, h] : state().memo) {
    struct stat st {};
    bool same = ::stat(path.c_str(), &st) == 0;
    if (same) {
      same = file_stat_of(st) == h.st;
    }
    if (!same)
      throw Error(fmt::format("{}: changed on disk after this run hashed it (its recorded sha256 is {}); keep a "
                              "run's inputs unchanged while it runs, then rerun (a resume refuses the changed file)",
                              path, h.sha256.substr(0, 16)),
                  ErrorKind::kRuntime);
  }
}

std::vector<results::FileHash> cacheable_file_hashes() {
  std::vector<results::FileHash> out;
  for (const auto& [path, h] : state().memo) {
    if (!h.cacheable) continue;
    results::FileHash f;
    f.path = path;
    f.dev = h.st.dev;
    f.inode = h.st.inode;
    f.bytes = h.st.bytes;
    f.mtime_ns = h.st.mtime_ns;
    f.ctime_ns = h.st.ctime_ns;
    f.sha256 = h.sha256;
    out.push_back(std::move(f));
  }
  return out;
}

HashCounters hash_counters() { return state().counters; }

std::vector<results::RunInput> model_inputs(const std::string& spec) {
  std::vector<results::RunInput> out;
  auto add = [&](const std::string& role, const std::string& name, const std::string& path) {
    results::RunInput r = hash_input_file(path);
    r.role = role;
    r.owner = spec;
    r.name = name;
    out.push_back(std::move(r));
  };
  auto base_name = [](const std::string& p) {
    const auto slash = p.find_last_of('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
  };
  // The files behind the spec: a named model's cached GGUF, a Hub id's snapshot folder or GGUF.
  const std::string root = model_file_of(spec);
  if (root.size() > 5 && root.substr(root.size() - 5) == ".gguf") {
    add("weights", base_name(root), root);
    return out;
  }
  auto add_if = [&](const std::string& role, const std::string& name) {
    if (file_exists(root + "/" + name)) add(role, name, root + "/" + name);
  };
  // The order WeightStore::from_safetensors_dir reads them in: the shard index when there is one
  // (a stray model.safetensors beside it is never read), else model.safetensors (issue 46, item 1).
  if (file_exists(root + "/model.safetensors.index.json")) {
    add("weights", "model.safetensors.index.json", root + "/model.safetensors.index.json");
    const std::string index = root + "/model.safetensors.index.json";
    auto idx = parse_json_file(index);
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail_at(index, "weight_map", "expected an object mapping tensor names to shard files");
    std::set<std::string> shards;
    for (auto& [k, v] : idx["weight_map"].items()) {
      if (!v.is_string()) fail_at(index, "weight_map." + k, "expected a shard file name");
      shards.insert(v.get<std::string>());
    }
    for (const auto& sh : shards) add("weights", sh, root + "/" + sh);
  } else if (file_exists(root + "/model.safetensors")) {
    add("weights", "model.safetensors", root + "/model.safetensors");
  }
  add_if("config", "config.json");
  add_if("config", "generation_config.json");
  add_if("tokenizer", "tokenizer.json");
  add_if("tokenizer", "tokenizer_config.json");
  add_if("chat_template", "chat_template.jinja");
  add_if("chat_template", "chat_template.json");
  return out;
}

std::vector<results::RunInput> dataset_inputs(const LoadedTasks& lt) {
  std::vector<results::RunInput> out;
  for (const auto& st : lt.suite_tasks) {
    auto files = lt.data_files.find(st.spec);
    if (files == lt.data_files.end()) continue;
    std::set<std::string> done;
    for (const auto& [key, path] : files->second) {
      if (!done.insert(key).second) continue;
      results::RunInput r = hash_input_file(path);
      r.role = "dataset";
      r.owner = st.spec;
      r.name = key;
      out.push_back(std::move(r));
    }
  }
  return out;
}

void add_input_identity(results::RunInfo& info, const std::vector<std::string>& model_specs, const LoadedTasks& lt) {
  for (const auto& m : model_specs) {
    auto files = model_inputs(m);
    info.inputs.insert(info.inputs.end(), files.begin(), files.end());
  }
  const auto data = dataset_inputs(lt);
  info.inputs.insert(info.inputs.end(), data.begin(), data.end());
  for (const auto& st : lt.suite_tasks) {
    std::vector<results::RunInput> mine;
    std::string source;
    for (const auto& d : data)
      if (d.owner == st.spec) {
        mine.push_back(d);
        source += (source.empty() ? "" : ", ") + d.path;
      }
    info.datasets.push_back({st.spec, source, mine.empty() ? "" : combined_sha256(mine)});
  }
  // Every other file the tasks and policies read while being set up (engine/util/io.h
  // opened_inputs): a task's template file, LongProc's webpages, each learned policy's weights.
  std::set<std::string> seen;
  for (const auto& in : info.inputs) seen.insert(in.path);
  for (const auto& o : opened_inputs()) {
    if (seen.count(o.path)) continue;
    std::error_code ec;
    const std::string canon = std::filesystem::weakly_canonical(o.path, ec).string();
    if (!ec && seen.count(canon)) continue;
    results::RunInput r = hash_input_file(o.path);
    r.role = o.kind == InputKind::kChatTemplate     ? "template"
             : o.kind == InputKind::kDataRecord     ? "data_record"
             : o.kind == InputKind::kPolicyMetadata ? "policy_config"
                                                    : "policy_weights";
    r.owner = "read";
    r.name = o.path;
    seen.insert(o.path);
    info.inputs.push_back(std::move(r));
  }
}

std::string combined_sha256(const std::vector<results::RunInput>& files) {
  if (files.size() == 1) return files.front().sha256;
  std::string cat;
  for (const auto& f : files) cat += f.sha256;
  return sha256_hex(cat);
}

}  // namespace kvb::cli
