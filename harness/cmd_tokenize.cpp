// `kvbench tokenize`: shows exactly what a model sees for a text or a chat — the rendered chat
// prompt (with --chat) and its token ids and pieces. Needs only the tokenizer files of a model
// folder (tokenizer.json, and tokenizer_config.json for --chat), or a GGUF file's metadata (a
// .gguf path, a named model, `org/name:FILE.gguf`); a Hub id resolves to its snapshot folder.
//
// Output (stdout):
//   ===== BEGIN PROMPT (<n> bytes) =====      (only with --chat / --messages)
//   <the rendered prompt, byte for byte>
//   ===== END PROMPT =====                    (the newline before this line is not part of it)
//   ===== TOKENS (<n>) =====
//   <index>\t<id>\t<piece>\t<text>[\tspecial]  (one line per token; piece = vocabulary string,
//                                              text = decode([id]); both quoted with escapes)
//   ids: [<id>, ...]
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness/commands.h"
#include "harness/model_source.h"

namespace kvb::cli {

namespace {

struct TokenizeArgs {
  std::string model, text, messages, chat_template;
  bool chat = false, no_thinking = false, no_add_special = false;
};

/// `s` in double quotes with \\ \" \n \r \t and \xNN escapes for control bytes and invalid
/// UTF-8; valid non-ASCII characters are kept as they are.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80) {
      size_t len;
      const char32_t cp = tok::uni::decode_utf8(s, i, &len);
      if (cp == 0xFFFD && len == 1 && s.substr(i, 3) != "\xEF\xBF\xBD") out += fmt::format("\\x{:02x}", b);
      else out.append(s.substr(i, len));
      i += len;
      continue;
    }
    switch (b) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (b < 0x20 || b == 0x7F) out += fmt::format("\\x{:02x}", b);
        else out += static_cast<char>(b);
    }
    ++i;
  }
  return out + "\"";
}

void run_tokenize(const TokenizeArgs& a) {
  // What --model names: a .gguf file, a named model's cached GGUF or a Hub id's GGUF carry their
  // tokenizer and chat template in their metadata (the weights are only mapped); a directory or
  // a Hub id's snapshot folder gives its tokenizer files (its weights are not read).
  const std::string file = model_file_of(a.model);
  const bool is_gguf = file.size() > 5 && file.compare(file.size() - 5, 5, ".gguf") == 0;
  std::optional<LoadedModel> gguf;
  if (is_gguf) gguf = load_model(a.model, WeightFormat::kStored, a.chat_template);
  std::shared_ptr<const tok::Tokenizer> tok_ptr =
      gguf ? gguf->tokenizer : std::make_shared<const tok::Tokenizer>(tok::Tokenizer::from_dir(file));
  const tok::Tokenizer& tokenizer = *tok_ptr;
  const bool chat = a.chat || !a.messages.empty();
  std::string input = a.text;
  if (chat) {
    nlohmann::json messages;
    if (!a.messages.empty()) {
      messages = parse_json_file(a.messages, InputKind::kMessages);
      if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
      if (!messages.is_array()) fail_at(a.messages, "", "must be a JSON array of {{\"role\", \"content\"}} objects");
    } else {
      messages = nlohmann::json::array({{{"role", "user"}, {"content", a.text}}});
    }
    // chat_template.jinja, chat_template.json or tokenizer_config.json, as transformers finds it.
    if (gguf && !gguf->chat) fail_at(a.model, "tokenizer.chat_template", "missing: --chat needs a chat template");
    std::optional<chat::ChatTemplate> own;
    if (!gguf) own.emplace(chat::ChatTemplate::from_model_dir(file, a.chat_template));
    const chat::ChatTemplate& tmpl = gguf ? *gguf->chat : *own;
    chat::RenderOptions opts;
    opts.add_generation_prompt = true;
    if (a.no_thinking) opts.enable_thinking = false;
    input = tmpl.render_json(messages, opts);
    std::printf("===== BEGIN PROMPT (%zu bytes) =====\n", input.size());
    std::fwrite(input.data(), 1, input.size(), stdout);
    std::printf("\n===== END PROMPT =====\n");
  }
  // A rendered chat template already holds BOS where the model wants it (as transformers'
  // apply_chat_template(tokenize=True)); plain text gets the post-processor's special tokens.
  const bool add_special = !chat && !a.no_add_special;
  const std::vector<int32_t> ids = tokenizer.encode(input, add_special);
  std::printf("===== TOKENS (%zu) =====\n", ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    const std::string line = fmt::format("{}\t{}\t{}\t{}{}\n", i, id, quote(tokenizer.id_to_piece(id)),
                                         quote(tokenizer.decode(std::span<const int32_t>(&ids[i], 1))),
                                         tokenizer.is_special(id) ? "\tspecial" : "");
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  std::printf("ids: %s\n", nlohmann::json(ids).dump(-1, ' ', false).c_str());
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* c =
      app.add_subcommand("tokenize", "Show the token ids and pieces of a text or chat (what the model really sees)");
  c->add_option("--model", a->model, "Model folder (only its tokenizer files are read), .gguf file, named model or Hub id")
      ->required();
  auto* text = c->add_option("--text", a->text, "Text to tokenize (with --chat: one user message)");
  auto* msgs = c->add_option("--messages", a->messages,
                             "JSON file with an array of {\"role\", \"content\"} messages (implies --chat)");
  text->excludes(msgs);
  c->add_flag("--chat", a->chat,
              "Render with the model's chat template (chat_template.jinja, chat_template.json or "
              "tokenizer_config.json; generation prompt on)");
  c->add_option("--chat-template", a->chat_template,
                "With --chat: which of the model's named chat templates (default: \"default\")");
  c->add_flag("--no-thinking", a->no_thinking, "Pass enable_thinking=false to the chat template (Qwen3)");
  c->add_flag("--no-add-special", a->no_add_special,
              "Without --chat: do not add the post-processor's special tokens (e.g. BOS)");
  c->callback([a, text] {
    // --text "" is a valid input: the special tokens alone (e.g. BOS).
    if (text->count() == 0 && a->messages.empty()) fail("tokenize: give --text TEXT or --messages FILE.json");
    run_tokenize(*a);
  });
}

}  // namespace kvb::cli
