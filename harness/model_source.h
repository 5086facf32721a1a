// Resolving `--model` into a loaded model, its tokenizer and its chat template.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvb::cli {

/// A model ready for generation. `tokenizer`/`chat` may be absent (a weights-only directory).
struct LoadedModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<tok::Tokenizer> tokenizer;
  std::shared_ptr<chat::ChatTemplate> chat;
  std::string id;                   ///< what the user named
  std::vector<int32_t> eos_ids;     ///< config.json + generation_config.json + tokenizer EOS
};

/// Loads `spec`: a Hugging Face model directory (config.json, safetensors, tokenizer.json,
/// tokenizer_config.json). Throws kvb::Error naming the missing or bad file.
LoadedModel load_model(const std::string& spec);

/// Prompt token ids: with `chat`, the chat template rendered with a generation prompt over
/// [system?, user] and tokenized without extra special tokens (as transformers'
/// apply_chat_template(tokenize=True)); otherwise the text tokenized with special tokens (BOS).
std::vector<int32_t> build_prompt(const LoadedModel& m, const std::string& text, bool chat,
                                  const std::string& system, std::optional<bool> enable_thinking,
                                  std::string* rendered = nullptr);

}  // namespace kvb::cli
