// The policy catalog (catalog.h): engine/policies/catalog.json, embedded by the build
// (tasks/embed_files.cmake writes policy_catalog.h), parsed once into PolicyCatalogEntry values.
#include "engine/policies/catalog.h"

#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/policies/params.h"
#include "engine/policies/policy_catalog.h"
#include "engine/policies/scheduled.h"
#include "engine/policies/snapkv.h"
#include "engine/util/error.h"

namespace kvb {
namespace {

using nlohmann::json;

/// `j[key]` of the entry `name`, required to be of `type` ("string", "number", "boolean",
/// "object", "array"); throws naming the entry and field otherwise.
const json& field(const json& j, const std::string& name, const char* key, json::value_t type) {
  const auto it = j.find(key);
  if (it == j.end() || it->type() != type)
    fail("policy catalog: entry '{}': field '{}' is missing or not a {}", name, key, json(type).type_name());
  return *it;
}

/// The `key` of `j` when present (of `type`), else `fallback`.
template <class T>
T optional_field(const json& j, const std::string& name, const char* key, json::value_t type, T fallback) {
  return j.contains(key) ? field(j, name, key, type).get<T>() : fallback;
}

/// The table an entry's "schedule" / "snapkv" group starts with (empty without one).
std::vector<PolicyParamInfo> shared_table(const json& e, const std::string& name) {
  constexpr auto kNum = json::value_t::number_unsigned, kInt = json::value_t::number_integer;
  const auto integer = [&](const json& g, const char* key) {
    const auto it = g.find(key);
    if (it == g.end() || !(it->type() == kNum || it->type() == kInt))
      fail("policy catalog: entry '{}': field '{}' is missing or not an integer", name, key);
    return it->get<int64_t>();
  };
  if (e.contains("schedule") && e.contains("snapkv"))
    fail("policy catalog: entry '{}': both 'schedule' and 'snapkv' are given", name);
  if (e.contains("schedule")) {
    const json& g = field(e, name, "schedule", json::value_t::object);
    const auto b = json::value_t::boolean;
    const std::string threshold_key =
        optional_field<std::string>(g, name, "threshold_key", json::value_t::string, "threshold");
    return schedule_params(integer(g, "buffer"), integer(g, "window"), integer(g, "sinks"),
                           optional_field(g, name, "decode", b, true), optional_field(g, name, "global_kind", b, false),
                           threshold_key.c_str());
  }
  if (e.contains("snapkv")) {
    const json& g = field(e, name, "snapkv", json::value_t::object);
    const auto s = json::value_t::string;
    return snapkv_params(integer(g, "window"), integer(g, "kernel"), field(g, name, "pool", s).get<std::string>(),
                         field(g, name, "gqa", s).get<std::string>(), integer(g, "buffer"));
  }
  return {};
}

/// One entry of catalog.json built (see catalog.h for its fields).
PolicyCatalogEntry build_entry(const std::string& name, const json& e) {
  static const std::set<std::string> known = {"description", "schedule", "snapkv", "help", "params", "learned"};
  for (const auto& [k, v] : e.items())
    if (!known.count(k)) fail("policy catalog: entry '{}': unknown field '{}'", name, k);
  const auto str = json::value_t::string;
  PolicyCatalogEntry out;
  out.description = field(e, name, "description", str).get<std::string>();
  std::vector<std::pair<std::string, std::string>> help;
  if (e.contains("help"))
    for (const auto& [k, v] : field(e, name, "help", json::value_t::object).items()) {
      if (!v.is_string()) fail("policy catalog: entry '{}': help of '{}' is not a string", name, k);
      help.emplace_back(k, v.get<std::string>());
    }
  std::vector<PolicyParamInfo> own;
  if (e.contains("params"))
    for (const json& p : field(e, name, "params", json::value_t::array)) {
      if (p == "compress") {
        own.push_back(compress_param());
        continue;
      }
      if (!p.is_array() || p.size() != 3 || !p[0].is_string() || !p[1].is_string() || !p[2].is_string())
        fail("policy catalog: entry '{}': a parameter is neither [key, default, help] (strings) nor \"compress\": {}",
             name, p.dump());
      own.push_back({p[0].get<std::string>(), p[1].get<std::string>(), p[2].get<std::string>()});
    }
  try {
    out.params = extend_params(shared_table(e, name), help, std::move(own));
  } catch (const Error& err) {
    fail("policy catalog: entry '{}': {}", name, err.what());
  }
  if (e.contains("learned")) {
    const json& l = field(e, name, "learned", json::value_t::object);
    const auto get = [&](const char* key) { return field(l, name, key, str).get<std::string>(); };
    out.learned = LearnedWeightsInfo{get("file_param"), get("random_param"), get("what"), get("paper"), get("where")};
  }
  return out;
}

const std::map<std::string, PolicyCatalogEntry>& catalog() {
  static const std::map<std::string, PolicyCatalogEntry> entries = [] {
    const policy_catalog::File& file = policy_catalog::files[0];
    const json j = json::parse(file.data, file.data + file.size);
    if (!j.is_object()) fail("policy catalog: {} is not a JSON object", file.name);
    std::map<std::string, PolicyCatalogEntry> out;
    for (const auto& [name, e] : j.items()) {
      if (!e.is_object()) fail("policy catalog: entry '{}' is not an object", name);
      out.emplace(name, build_entry(name, e));
    }
    return out;
  }();
  return entries;
}

}  // namespace

const PolicyCatalogEntry& policy_catalog_entry(const std::string& name) {
  const auto& c = catalog();
  const auto it = c.find(name);
  if (it == c.end()) fail("policy catalog: no entry '{}'", name);
  return it->second;
}

std::vector<std::string> policy_catalog_names() {
  std::vector<std::string> out;
  for (const auto& [name, e] : catalog()) out.push_back(name);
  return out;
}

void LearnedWeightsChoice::require() const {
  if (path.empty() && random_seed < 0)
    fail(
        "policy '{}': no {} for this model: pass {}=PATH ({}; `kvbench policies --checkpoints` lists the released "
        "ones), or {}=SEED for RANDOM test {}",
        policy, info.what, info.file_param, info.where, info.random_param, info.what);
}

LearnedWeightsChoice learned_weights_choice(const std::string& name, PolicyParams& params) {
  const PolicyCatalogEntry& e = policy_catalog_entry(name);
  if (!e.learned) fail("policy catalog: entry '{}' has no 'learned' group", name);
  LearnedWeightsChoice c;
  c.policy = name;
  c.info = *e.learned;
  c.path = params.get_string(c.info.file_param);
  c.random_seed = params.get_int(c.info.random_param);
  return c;
}

LearnedWeightsChoice learned_weights_choice(PolicyParams& params) {
  return learned_weights_choice(params.policy_name(), params);
}

}  // namespace kvb
