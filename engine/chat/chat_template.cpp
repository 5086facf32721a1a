// ChatTemplate: renders a Hugging Face chat template exactly as transformers'
// apply_chat_template(conversation, tokenize=False, add_generation_prompt=..., **kwargs) does
// (transformers/tokenization_utils_base.py + utils/chat_template_utils.py, v5):
//   * message keys whose value is None are dropped;
//   * reasoning fields are aliased: a message with reasoning_content / thinking / reasoning gets
//     {"thinking": r, **message, "reasoning_content": r} (_alias_reasoning_fields);
//   * the template sees messages, tools=None, documents=None, add_generation_prompt, the
//     special tokens that are set (bos_token, eos_token), then the caller's kwargs
//     (enable_thinking, extra), kwargs overriding special tokens.
#include "engine/chat/chat_template.h"

#include "engine/chat/jinja/jinja.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb::chat {

namespace {

const jinja::Template& tmpl(const std::shared_ptr<const void>& p) { return *static_cast<const jinja::Template*>(p.get()); }

// A special token in tokenizer_config.json is a string, null, or an AddedToken object.
std::string token_field(const nlohmann::json& cfg, const char* key, const std::string& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  fail_at(path, key, "expected a string, null or an object with a string \"content\"");
}

nlohmann::ordered_json normalize_message(const nlohmann::ordered_json& m) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto it = m.begin(); it != m.end(); ++it)
    if (!it.value().is_null()) out[it.key()] = it.value();
  static const char* fields[] = {"reasoning_content", "thinking", "reasoning"};
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* f : fields)
    if (out.contains(f)) {
      reasoning = &out[f];
      break;
    }
  if (!reasoning) return out;
  nlohmann::ordered_json r = *reasoning;
  nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
  aliased["thinking"] = r;
  for (auto it = out.begin(); it != out.end(); ++it) aliased[it.key()] = it.value();
  aliased["reasoning_content"] = r;
  return aliased;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string origin, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), origin_(std::move(origin)), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  program_ = std::make_shared<const jinja::Template>(source_, origin_);
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
  nlohmann::json cfg = parse_json_file(path);
  if (!cfg.is_object()) fail_at(path, "", "expected a JSON object");
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) fail_at(path, "chat_template", "missing: this tokenizer has no chat template");
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    // Named templates: [{"name": "default", "template": "..."}, ...]; use "default".
    for (const auto& e : *it)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        source = e["template"].get<std::string>();
    if (source.empty()) fail_at(path, "chat_template", "no template named \"default\" in the list");
  } else {
    fail_at(path, "chat_template", "expected a string or a list of named templates");
  }
  return ChatTemplate(std::move(source), path + ": chat_template", token_field(cfg, "bos_token", path),
                      token_field(cfg, "eos_token", path));
}

std::string ChatTemplate::render(const std::vector<Message>& messages, const RenderOptions& opts) const {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    o["role"] = m.role;
    o["content"] = m.content;
    arr.push_back(std::move(o));
  }
  return render_ordered(arr, opts);
}

std::string ChatTemplate::render_json(const nlohmann::json& messages, const RenderOptions& opts) const {
  return render_ordered(nlohmann::ordered_json::parse(messages.dump()), opts);
}

std::string ChatTemplate::render_ordered(const nlohmann::ordered_json& messages, const RenderOptions& opts) const {
  if (!messages.is_array()) throw Error(origin_ + ": messages must be a JSON array");
  if (messages.empty()) throw Error(origin_ + ": cannot apply a chat template to an empty conversation");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) throw Error(origin_ + ": message " + std::to_string(i) + " is not a JSON object");
    msgs.push_back(normalize_message(messages[i]));
  }
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (!bos_.empty()) vars["bos_token"] = bos_;
  if (!eos_.empty()) vars["eos_token"] = eos_;
  if (opts.enable_thinking) vars["enable_thinking"] = *opts.enable_thinking;
  if (!opts.extra.is_null()) {
    if (!opts.extra.is_object()) throw Error(origin_ + ": RenderOptions.extra must be a JSON object");
    auto extra = nlohmann::ordered_json::parse(opts.extra.dump());
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  }
  vars["messages"] = std::move(msgs);
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = opts.add_generation_prompt;
  return tmpl(program_).render(vars);
}

}  // namespace kvb::chat
