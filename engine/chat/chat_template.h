// kvb::chat::ChatTemplate — renders a Hugging Face `chat_template` (Jinja) byte-for-byte as
// transformers' `apply_chat_template(..., tokenize=False)` does, using the Jinja-subset
// interpreter in engine/chat/jinja.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvb::chat {

/// One chat message. `role` is "system", "user" or "assistant".
struct Message {
  std::string role;
  std::string content;
};

/// Options of one render, mirroring apply_chat_template's keyword arguments.
struct RenderOptions {
  bool add_generation_prompt = true;
  /// Qwen3's `enable_thinking`; unset means "not passed" (the template's own default).
  std::optional<bool> enable_thinking;
  /// Extra variables passed to the template (e.g. {"date_string": "26 Jul 2024"}).
  nlohmann::json extra = nlohmann::json::object();
};

/// A parsed chat template plus the special-token strings it may reference.
class ChatTemplate {
 public:
  /// Parses `source`. `origin` names the file for error messages. Throws kvb::Error
  /// ("<origin>:<line>: <what>") on syntax errors, ("<origin>: not valid UTF-8") on bad UTF-8.
  ChatTemplate(std::string source, std::string origin, std::string bos_token = "", std::string eos_token = "");
  /// Reads `chat_template`, `bos_token` and `eos_token` from a tokenizer_config.json.
  /// Throws kvb::Error naming the file and field when it has no chat_template.
  /// `name` selects one of a list of named templates ([{"name", "template"}, ...]); empty means
  /// "default" (as transformers does when it is not given). An unknown name is an error.
  static ChatTemplate from_tokenizer_config(const std::string& path, const std::string& name = "");
  /// A model directory's chat template as transformers 4.4x+ finds it: DIR/chat_template.jinja
  /// (named ones in DIR/additional_chat_templates/NAME.jinja), else DIR/chat_template.json
  /// ({"chat_template": string or list}), else tokenizer_config.json's `chat_template` (a string
  /// or a list of {name, template}). bos/eos tokens come from tokenizer_config.json. `name`
  /// as in from_tokenizer_config. Throws kvb::Error ("<file>: <field>: <what>") when none is
  /// found or the name is unknown.
  static ChatTemplate from_model_dir(const std::string& dir, const std::string& name = "");
  /// Whether DIR holds any of the chat-template sources from_model_dir reads.
  static bool model_dir_has_template(const std::string& dir);

  /// Renders `messages`. Throws kvb::Error ("<origin>:<line>: ...") for runtime template errors,
  /// including raise_exception(...) called by the template.
  std::string render(const std::vector<Message>& messages, const RenderOptions& opts = {}) const;
  /// Same, with messages given as a JSON array of message objects ({"role","content"} plus any
  /// fields the template reads, e.g. "reasoning_content"). nlohmann::json sorts object keys, so
  /// templates that iterate or tojson a message see sorted keys; use render_ordered to keep order.
  std::string render_json(const nlohmann::json& messages, const RenderOptions& opts = {}) const;
  /// Same, keeping each message's key order (as Python dicts do).
  std::string render_ordered(const nlohmann::ordered_json& messages, const RenderOptions& opts = {}) const;

  const std::string& source() const { return source_; }
  /// The name used in error messages (the file path + ": chat_template" when loaded from a config).
  const std::string& origin() const { return origin_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  std::string source_, origin_, bos_, eos_;
  std::shared_ptr<const void> program_;  // parsed jinja program (owned by engine/chat/jinja)
};

}  // namespace kvb::chat
