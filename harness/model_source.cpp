#include "harness/model_source.h"

#include <algorithm>
#include <map>
#include <regex>

#include <cstdlib>
#include <filesystem>

#include "engine/model/gguf.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "engine/util/memory.h"
#include "datasets/hub.h"
#include "harness/named_models.h"

namespace kvb::cli {

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

LoadedModel load_gguf_model(const std::string& path, const std::string& id, WeightFormat fmt,
                            const std::string& chat_template) {
  LoadedModel m;
  m.id = id;
  GgufModel g = load_gguf(path);
  m.tokenizer = std::make_shared<tok::Tokenizer>(tok::Tokenizer::from_json(g.tokenizer_json, path, g.tokenizer_config));
  // --chat-template NAME: `tokenizer.chat_template.NAME`; "default" (or none) is the unnamed one.
  std::string tmpl = g.chat_template, field = "tokenizer.chat_template";
  if (!chat_template.empty() && chat_template != "default") {
    auto it = g.named_chat_templates.find(chat_template);
    if (it == g.named_chat_templates.end()) {
      std::string names = "default";
      for (const auto& [n, t] : g.named_chat_templates) names += ", " + n;
      fail_at(path, "tokenizer.chat_template", "no template named \"{}\" (there are: {})", chat_template,
              g.chat_template.empty() && g.named_chat_templates.empty() ? "none" : names);
    }
    tmpl = it->second;
    field += "." + chat_template;
  }
  if (!tmpl.empty()) {
    auto str = [&](const char* k) {
      auto it = g.tokenizer_config.find(k);
      return it != g.tokenizer_config.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    m.chat = std::make_shared<chat::ChatTemplate>(tmpl, path + ": " + field, str("bos_token"), str("eos_token"));
  }
  m.model = Model::from_weights(std::move(g.config), std::move(g.weights), path, fmt);
  return m;
}

}  // namespace

std::string default_model_path() { return named_model_path(*find_named_model(kDefaultModelName)); }

bool is_hub_model_id(const std::string& spec) {
  static const std::regex kHub(R"(^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+(@[A-Za-z0-9._/-]+)?(:[^/:]+\.gguf)?$)");
  std::error_code ec;
  // `dir/file.gguf` that does not exist is a mistyped path ("file not found"), not a repository.
  if (spec.find(':') == std::string::npos && ends_with(spec, ".gguf")) return false;
  return !std::filesystem::exists(spec, ec) && std::regex_match(spec, kHub);
}

std::string model_file_of(const std::string& spec) {
  if (const NamedModel* nm = find_named_model(spec); nm && !file_exists(spec))
    return ensure_named_model(*nm, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  if (!is_hub_model_id(spec)) return spec;
  // A Hub id: resolved once per process (HubClient::resolve_model: the Hugging Face cache, no
  // request under HF_HUB_OFFLINE=1, else the Hub's file list), or one GGUF file of the repository.
  static std::map<std::string, std::string> resolved;
  if (auto it = resolved.find(spec); it != resolved.end()) return it->second;
  datasets::HubClient hub(datasets::HubConfig::from_env());
  std::string local;
  if (const size_t colon = spec.find(':'); colon != std::string::npos) {
    std::string repo = spec.substr(0, colon), rev = "main";
    if (const size_t at = repo.find('@'); at != std::string::npos) {
      rev = repo.substr(at + 1);
      repo = repo.substr(0, at);
    }
    local = hub.download({datasets::RepoType::kModel, repo, rev, spec.substr(colon + 1)});
  } else {
    local = hub.resolve_model(spec);
  }
  resolved[spec] = local;
  return local;
}

namespace {
enum class SourceKind { kGguf, kDir };

/// Which kind of model `spec` names (a named model is fetched here when not cached: its path
/// goes to `*file`); throws kvb::Error when the file or directory is missing.
SourceKind source_kind(const std::string& spec, std::string* file) {
  *file = model_file_of(spec);
  if (ends_with(*file, ".gguf")) {
    if (!file_exists(*file)) fail("--model {}: file not found", spec);
    return SourceKind::kGguf;
  }
  if (!file_exists(*file + "/config.json")) {
    std::string names;
    for (const auto& m : named_models()) names += (names.empty() ? "" : ", ") + m.name;
    fail(
        "--model {}: not a model directory (no config.json), not a .gguf file, and not a named model ({}; "
        "`kvbench models`)",
        spec, names);
  }
  return SourceKind::kDir;
}
}  // namespace

void check_model_source(const std::string& spec) {
  std::string file;
  switch (source_kind(spec, &file)) {
    case SourceKind::kGguf: (void)GgufFile::open(file); break;
    case SourceKind::kDir: ModelConfig::from_dir(file).validate(file + "/config.json"); break;
  }
}

namespace {

/// load_model without release_freed_heap().
LoadedModel load_model_unreleased(const std::string& spec, WeightFormat fmt, const std::string& chat_template) {
  std::string file;
  if (source_kind(spec, &file) == SourceKind::kGguf) {
    LoadedModel m = load_gguf_model(file, spec, fmt, chat_template);
    m.eos_ids = m.model->config().eos_token_ids;
    if (auto e = m.tokenizer->eos_id(); e && std::find(m.eos_ids.begin(), m.eos_ids.end(), *e) == m.eos_ids.end())
      m.eos_ids.push_back(*e);
    return m;
  }
  LoadedModel m;
  m.id = spec;
  const std::string& dir = file;  // spec itself, or a Hub id's snapshot folder
  m.model = Model::load_dir(dir, fmt);
  if (file_exists(dir + "/tokenizer.json"))
    m.tokenizer = std::make_shared<tok::Tokenizer>(tok::Tokenizer::from_dir(dir));
  // With a template name, its absence is an error at load; without, only --chat needs one.
  if (!chat_template.empty() || chat::ChatTemplate::model_dir_has_template(dir))
    m.chat = std::make_shared<chat::ChatTemplate>(chat::ChatTemplate::from_model_dir(dir, chat_template));
  m.eos_ids = m.model->config().eos_token_ids;
  if (m.tokenizer) {
    if (auto e = m.tokenizer->eos_id(); e && std::find(m.eos_ids.begin(), m.eos_ids.end(), *e) == m.eos_ids.end())
      m.eos_ids.push_back(*e);
  }
  return m;
}

}  // namespace

LoadedModel load_model(const std::string& spec, WeightFormat fmt, const std::string& chat_template) {
  LoadedModel m = load_model_unreleased(spec, fmt, chat_template);
  release_freed_heap();
  return m;
}

GenerationDefaults generation_defaults(const std::string& spec) {
  const std::string file = model_file_of(spec);
  if (ends_with(file, ".gguf")) return {};
  return GenerationDefaults::from_file(file + "/generation_config.json");
}

nlohmann::json resolve_sampling(const nlohmann::json& suite_sampling, const GenerationDefaults& gen,
                                std::optional<double> temperature, std::optional<double> top_p,
                                std::optional<int> top_k, std::string* source) {
  nlohmann::json s;
  std::string from;
  if (suite_sampling.is_object() && !suite_sampling.empty()) {
    s = suite_sampling;
    from = "suite";
  } else if (gen.present) {
    s = gen.sampling();
    from = "generation_config";
  } else {
    s = nlohmann::json::object();
    from = "default";
  }
  if (temperature) s["temperature"] = *temperature;
  if (top_p) s["top_p"] = *top_p;
  if (top_k) s["top_k"] = *top_k;
  if (temperature || top_p || top_k) from += "+cli";
  if (source) *source = from;
  return s;
}

std::string render_chat(const LoadedModel& m, const std::vector<chat::Message>& messages,
                        std::optional<bool> enable_thinking) {
  if (!m.chat) {
    if (ends_with(m.id, ".gguf") || find_named_model(m.id))
      fail_at(m.id, "tokenizer.chat_template", "missing: --chat needs a chat template");
    fail_at(m.id + "/tokenizer_config.json", "chat_template",
            "missing: --chat needs a chat template (none in chat_template.jinja, chat_template.json or "
            "tokenizer_config.json)");
  }
  chat::RenderOptions o;
  o.add_generation_prompt = true;
  o.enable_thinking = enable_thinking;
  return m.chat->render(messages, o);
}

std::vector<int32_t> build_prompt(const LoadedModel& m, const std::string& text, bool chat, const std::string& system,
                                  std::optional<bool> enable_thinking, std::string* rendered) {
  if (!m.tokenizer) fail("--model {}: no tokenizer.json, cannot tokenize a text prompt", m.id);
  if (!chat) {
    if (rendered) *rendered = text;
    return m.tokenizer->encode(text, /*add_special_tokens=*/true);
  }
  std::vector<chat::Message> msgs;
  if (!system.empty()) msgs.push_back({"system", system});
  msgs.push_back({"user", text});
  std::string s = render_chat(m, msgs, enable_thinking);
  if (rendered) *rendered = s;
  return m.tokenizer->encode(s, /*add_special_tokens=*/false);
}

WeightFormat parse_weights_option(const std::string& text) {
  if (text == "stored") return WeightFormat::kStored;
  if (text == "f32") return WeightFormat::kF32;
  if (text == "bf16") return WeightFormat::kBF16;
  fail("--weights: expected stored, f32 or bf16, got '{}'", text);
}

}  // namespace kvb::cli
