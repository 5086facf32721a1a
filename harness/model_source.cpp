#include "harness/model_source.h"

#include <algorithm>

#include "engine/util/error.h"
#include "engine/util/io.h"

namespace kvb::cli {

LoadedModel load_model(const std::string& spec) {
  LoadedModel m;
  m.id = spec;
  if (!file_exists(spec + "/config.json"))
    fail("--model {}: not a model directory (no config.json)", spec);
  m.model = Model::load_dir(spec);
  if (file_exists(spec + "/tokenizer.json"))
    m.tokenizer = std::make_shared<tok::Tokenizer>(tok::Tokenizer::from_dir(spec));
  const std::string tc = spec + "/tokenizer_config.json";
  if (file_exists(tc)) {
    auto j = parse_json_file(tc);
    if (j.contains("chat_template")) m.chat = std::make_shared<chat::ChatTemplate>(chat::ChatTemplate::from_tokenizer_config(tc));
  }
  m.eos_ids = m.model->config().eos_token_ids;
  if (m.tokenizer) {
    if (auto e = m.tokenizer->eos_id(); e && std::find(m.eos_ids.begin(), m.eos_ids.end(), *e) == m.eos_ids.end())
      m.eos_ids.push_back(*e);
  }
  return m;
}

std::vector<int32_t> build_prompt(const LoadedModel& m, const std::string& text, bool chat,
                                  const std::string& system, std::optional<bool> enable_thinking,
                                  std::string* rendered) {
  if (!m.tokenizer) fail("--model {}: no tokenizer.json, cannot tokenize a text prompt", m.id);
  if (!chat) {
    if (rendered) *rendered = text;
    return m.tokenizer->encode(text, /*add_special_tokens=*/true);
  }
  if (!m.chat) fail("--model {}: --chat needs a chat_template in tokenizer_config.json", m.id);
  std::vector<chat::Message> msgs;
  if (!system.empty()) msgs.push_back({"system", system});
  msgs.push_back({"user", text});
  chat::RenderOptions o;
  o.add_generation_prompt = true;
  o.enable_thinking = enable_thinking;
  std::string s = m.chat->render(msgs, o);
  if (rendered) *rendered = s;
  return m.tokenizer->encode(s, /*add_special_tokens=*/false);
}

}  // namespace kvb::cli
