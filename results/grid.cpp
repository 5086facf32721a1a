#include "results/grid.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <unordered_map>

#include "engine/util/error.h"
#include "engine/util/hash.h"

namespace kvb::results {

std::string PolicySpec::label() const {
  if (!display.empty()) return display;
  if (params.is_null() || (params.is_object() && params.empty())) return name;
  return name + params.dump();  // nlohmann::json objects iterate in sorted key order
}

nlohmann::json SamplingParams::to_json() const {
  return nlohmann::json{
      {"max_new_tokens", max_new_tokens}, {"temperature", temperature}, {"top_k", top_k}, {"top_p", top_p}};
}

uint64_t derive_seed(uint64_t base_seed, std::string_view task, std::string_view example_id, int sample_index) {
  std::string msg = "kvbench-seed";
  msg.push_back('\0');
  msg += std::to_string(base_seed);
  msg.push_back('\0');
  msg += task;
  msg.push_back('\0');
  msg += example_id;
  msg.push_back('\0');
  msg += std::to_string(sample_index);
  std::string h = sha256_hex(msg);
  uint64_t v = 0;
  std::from_chars(h.data(), h.data() + 16, v, 16);
  return v & 0x7fffffffffffffffULL;
}

std::string work_item_key(const WorkItem& it) {
  nlohmann::json j{{"v", 1},
                   {"model", it.model_id},
                   {"revision", it.model_revision},
                   {"policy", it.policy},
                   {"params", it.policy_params.is_null() ? nlohmann::json::object() : it.policy_params},
                   {"budget", it.budget},
                   {"sampling", it.sampling},
                   {"task", it.task},
                   {"example", it.example_id},
                   {"prompt_sha256", it.prompt_sha256},
                   {"sample", it.sample_index},
                   {"seed", it.seed}};
  return sha256_hex(j.dump());
}

std::vector<WorkItem> expand_grid(const GridSpec& spec) {
  if (spec.models.empty()) fail("grid: no models given");
  if (spec.policies.empty()) fail("grid: no policies given");
  if (spec.examples.empty()) fail("grid: no examples (check --task / --limit)");
  if (spec.samples < 1) fail("grid: --samples must be >= 1, got {}", spec.samples);
  bool any_budgeted = false;
  std::set<std::string> labels;
  for (const auto& p : spec.policies) {
    if (p.name.empty()) fail("grid: empty policy name");
    if (!p.params.is_null() && !p.params.is_object()) fail("grid: policy '{}': params must be a JSON object", p.name);
    if (!labels.insert(p.label()).second) fail("grid: policy '{}' given twice", p.label());
    any_budgeted |= p.uses_budget;
  }
  if (any_budgeted && spec.budgets.empty()) fail("grid: no budgets given (--budgets)");
  std::set<int64_t> seen_budgets;
  for (int64_t b : spec.budgets) {
    if (b <= 0) fail("grid: budget must be > 0 tokens, got {}", b);
    if (!seen_budgets.insert(b).second) fail("grid: budget {} given twice", b);
  }
  std::set<std::pair<std::string, std::string>> seen_examples;
  std::vector<std::string> prompt_hash;
  prompt_hash.reserve(spec.examples.size());
  for (const auto& e : spec.examples) {
    if (!seen_examples.insert({e.task, e.example_id}).second)
      fail("grid: task '{}' example '{}' appears twice", e.task, e.example_id);
    prompt_hash.push_back(sha256_hex(e.prompt));
  }
  // Seeds depend only on (task, example, sample): compute once.
  std::vector<uint64_t> seeds(spec.examples.size() * spec.samples);
  for (size_t e = 0; e < spec.examples.size(); ++e)
    for (int s = 0; s < spec.samples; ++s)
      seeds[e * spec.samples + s] = derive_seed(spec.seed, spec.examples[e].task, spec.examples[e].example_id, s);

  nlohmann::json sampling = spec.sampling.to_json();
  std::vector<WorkItem> out;
  for (const auto& m : spec.models) {
    for (const auto& p : spec.policies) {
      std::vector<int64_t> budgets = p.uses_budget ? spec.budgets : std::vector<int64_t>{kNoBudget};
      for (int64_t b : budgets) {
        for (size_t e = 0; e < spec.examples.size(); ++e) {
          for (int s = 0; s < spec.samples; ++s) {
            WorkItem it;
            it.model_id = m.id;
            it.model_revision = m.revision;
            it.policy = p.name;
            it.policy_params = p.params.is_null() ? nlohmann::json::object() : p.params;
            it.policy_label = p.label();
            it.budget = b;
            it.task = spec.examples[e].task;
            it.example_id = spec.examples[e].example_id;
            it.prompt_sha256 = prompt_hash[e];
            it.sample_index = s;
            it.seed = seeds[e * spec.samples + s];
            it.sampling = sampling;
            it.key = work_item_key(it);
            out.push_back(std::move(it));
          }
        }
      }
    }
  }
  return out;
}

static int parse_nonneg_int(std::string_view s, std::string_view what, std::string_view whole) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0)
    fail("{}: expected a non-negative integer, got '{}'", what, whole);
  return v;
}

Shard parse_shard(std::string_view text, std::string_view what) {
  auto slash = text.find('/');
  if (slash == std::string_view::npos)
    fail("{}: expected i/n (0-based shard index / shard count), got '{}'", what, text);
  Shard s;
  s.index = parse_nonneg_int(text.substr(0, slash), what, text);
  s.count = parse_nonneg_int(text.substr(slash + 1), what, text);
  if (s.count < 1) fail("{}: shard count must be >= 1, got '{}'", what, text);
  if (s.index >= s.count) fail("{}: shard index must be in [0, {}) (0-based), got '{}'", what, s.count, text);
  return s;
}

Shard resolve_shard(const std::optional<std::string>& cli, const EnvLookup& env) {
  if (cli) return parse_shard(*cli, "--shard");
  auto from_pair = [&](const char* rank, const char* size) -> std::optional<Shard> {
    const char* r = env(rank);
    const char* n = env(size);
    if (!r || !n || !*r || !*n) return std::nullopt;
    std::string text = std::string(r) + "/" + n;
    return parse_shard(text, std::string(rank) + "/" + size);
  };
  if (auto s = from_pair("SLURM_PROCID", "SLURM_NTASKS")) return *s;
  if (auto s = from_pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")) return *s;
  return Shard{};
}

std::vector<WorkItem> select_shard(const std::vector<WorkItem>& items, Shard shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count)
    fail("--shard: invalid shard {}/{}", shard.index, shard.count);
  if (shard.count == 1) return items;
  std::vector<std::string> keys;
  keys.reserve(items.size());
  for (const auto& it : items) keys.push_back(it.key);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::unordered_map<std::string, size_t> rank;
  for (size_t i = 0; i < keys.size(); ++i) rank.emplace(keys[i], i);
  std::vector<WorkItem> out;
  for (const auto& it : items)
    if (static_cast<int>(rank.at(it.key) % shard.count) == shard.index) out.push_back(it);
  return out;
}

}  // namespace kvb::results
