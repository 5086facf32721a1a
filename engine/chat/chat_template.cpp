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

#include <filesystem>
#include <string_view>

#include "engine/chat/jinja/jinja.h"
#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb::chat {

namespace {

const jinja::Template& tmpl(const std::shared_ptr<const void>& p) {
  return *static_cast<const jinja::Template*>(p.get());
}

// A special token in tokenizer_config.json is a string, null, or an AddedToken object.
std::string token_field(const nlohmann::json& cfg, const char* key, const std::string& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
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

namespace {
// Offset of the first byte that does not start or continue a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or npos.
size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (b < 0x80) n = 1;
    else if (b >= 0xC2 && b <= 0xDF) n = 2;
    else if (b == 0xE0) n = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC) n = 3;
    else if (b == 0xED) n = 3, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF) n = 3;
    else if (b == 0xF0) n = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) n = 4;
    else if (b == 0xF4) n = 4, hi = 0x8F;
    else return i;
    if (i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return i;
    }
    i += n;
  }
  return std::string_view::npos;
}
}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string origin, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), origin_(std::move(origin)), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  // transformers reads templates as UTF-8 text (a .jinja file with a stray byte raises
  // UnicodeDecodeError); rendering the bytes as they are would put them into the prompt.
  if (const size_t at = invalid_utf8_at(source_); at != std::string_view::npos)
    fail("{}: not valid UTF-8 (byte {} of the template)", origin_, at);
  program_ = std::make_shared<const jinja::Template>(source_, origin_);
}

namespace {

// The source of `name` ("" = "default") from a chat_template value: a string (only "default"),
// or a list of {"name", "template"} objects. `path`/`field` name the value in errors.
std::string select_template(const nlohmann::json& v, const std::string& name, const std::string& path,
                            const std::string& field) {
  const std::string want = name.empty() ? "default" : name;
  if (v.is_string()) {
    if (want != "default")
      fail_at(path, field, "no template named \"{}\": this model has a single (default) template", want);
    return v.get<std::string>();
  }
  if (!v.is_array()) fail_at(path, field, "expected a string or a list of named templates");
  std::string names;
  const nlohmann::json* found = nullptr;
  for (size_t i = 0; i < v.size(); ++i) {
    const auto& e = v[i];
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
        !e["template"].is_string())
      fail_at(path, fmt::format("{}[{}]", field, i), "expected an object with string \"name\" and \"template\"");
    const std::string n = e["name"].get<std::string>();
    // The last of equal names wins, as transformers' {t["name"]: t["template"] for t in list}.
    if (n == want) found = &e["template"];
    names += (names.empty() ? "" : ", ") + n;
  }
  if (found) return found->get<std::string>();
  fail_at(path, field, "no template named \"{}\" (the list has: {})", want, names.empty() ? "nothing" : names);
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path, const std::string& name) {
  nlohmann::json cfg = parse_json_file(path);
  if (!cfg.is_object()) fail_at(path, "", "expected a JSON object");
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) fail_at(path, "chat_template", "missing: this tokenizer has no chat template");
  std::string source = select_template(*it, name, path, "chat_template");
  const std::string tag = name.empty() || name == "default" ? "" : "[" + name + "]";
  return ChatTemplate(std::move(source), path + ": chat_template" + tag, token_field(cfg, "bos_token", path),
                      token_field(cfg, "eos_token", path));
}

bool ChatTemplate::model_dir_has_template(const std::string& dir) {
  if (file_exists(dir + "/chat_template.jinja") || file_exists(dir + "/chat_template.json")) return true;
  const std::string tc = dir + "/tokenizer_config.json";
  if (!file_exists(tc)) return false;
  nlohmann::json cfg = parse_json_file(tc);
  return cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null();
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir, const std::string& name) {
  const std::string tc = dir + "/tokenizer_config.json";
  nlohmann::json cfg = nlohmann::json::object();
  if (file_exists(tc)) {
    cfg = parse_json_file(tc);
    if (!cfg.is_object()) fail_at(tc, "", "expected a JSON object");
  }
  const std::string bos = token_field(cfg, "bos_token", tc), eos = token_field(cfg, "eos_token", tc);
  const std::string want = name.empty() ? "default" : name;
  const std::string jinja = dir + "/chat_template.jinja";
  if (file_exists(jinja)) {
    // transformers >= 4.50: the default template in chat_template.jinja, named ones in
    // additional_chat_templates/NAME.jinja; these replace any template in tokenizer_config.json.
    if (want == "default") return ChatTemplate(read_file(jinja, InputKind::kChatTemplate), jinja, bos, eos);
    const std::string extra = dir + "/additional_chat_templates/" + want + ".jinja";
    if (want.find('/') == std::string::npos && file_exists(extra))
      return ChatTemplate(read_file(extra, InputKind::kChatTemplate), extra, bos, eos);
    std::string names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/additional_chat_templates", ec))
      if (e.path().extension() == ".jinja") names += ", " + e.path().stem().string();
    fail_at(jinja, "chat_template", "no template named \"{}\" (there are: default{})", want, names);
  }
  const std::string js = dir + "/chat_template.json";
  if (file_exists(js)) {
    nlohmann::json j = parse_json_file(js);
    if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null())
      fail_at(js, "chat_template", "missing: expected {{\"chat_template\": ...}}");
    std::string source = select_template(j["chat_template"], name, js, "chat_template");
    const std::string tag = want == "default" ? "" : "[" + want + "]";
    return ChatTemplate(std::move(source), js + ": chat_template" + tag, bos, eos);
  }
  if (!cfg.contains("chat_template") || cfg["chat_template"].is_null())
    fail_at(tc, "chat_template",
            "missing: the model has no chat template (none in chat_template.jinja, chat_template.json or "
            "tokenizer_config.json)");
  return from_tokenizer_config(tc, name);
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
