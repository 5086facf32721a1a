// `--judge local:MODEL`: an LLM judge on kvbench's own engine (full KV cache, greedy decoding),
// same prompts and yes/no parsing as the OpenAI judge. See harness/judge_grading.h.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/util/error.h"
#include "harness/judge_grading.h"
#include "harness/model_source.h"

namespace kvb::cli {

namespace {

class LocalJudge : public graders::Judge {
 public:
  LocalJudge(const std::string& model, const graders::JudgeOptions& opts) : spec_(model), opts_(opts) {
    if (opts_.max_tokens < 1) fail("judge max_tokens: must be >= 1 (got {})", opts_.max_tokens);
    lm_ = load_model(model);
    if (!lm_.tokenizer) fail("--judge local:{}: the model has no tokenizer.json", model);
    EngineOptions eo;
    eo.max_batch = std::max(1, opts_.concurrency);
    engine_ = std::make_unique<Engine>(lm_.model, eo, nullptr);
  }

  std::string id() const override { return "local:" + spec_; }

  std::string request_json(const std::string& prompt) const override {
    nlohmann::json j = {{"model", spec_},
                        {"messages", nlohmann::json::array({{{"role", "user"}, {"content", prompt}}})},
                        {"chat_template", lm_.chat != nullptr},
                        {"enable_thinking", false},
                        {"temperature", 0},
                        {"max_tokens", opts_.max_tokens}};
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  std::vector<graders::JudgeReply> ask(const std::vector<std::string>& prompts) override {
    std::vector<graders::JudgeReply> out(prompts.size());
    std::vector<GenerationRequest> reqs;
    std::vector<size_t> idx;
    const int64_t max_ctx = lm_.model->config().max_position_embeddings;
    for (size_t i = 0; i < prompts.size(); ++i) {
      out[i].attempts = 1;
      try {
        GenerationRequest r;
        // Thinking off: a reasoning model must answer within max_tokens, as an API judge does.
        r.prompt = build_prompt(lm_, prompts[i], lm_.chat != nullptr, "", /*enable_thinking=*/false);
        if (static_cast<int64_t>(r.prompt.size()) + opts_.max_tokens > max_ctx) {
          out[i].error = fmt::format("judge {}: prompt of {} tokens + {} new exceeds the model's context of {}", id(),
                                     r.prompt.size(), opts_.max_tokens, max_ctx);
          continue;
        }
        r.max_new_tokens = opts_.max_tokens;
        r.stop_ids = lm_.eos_ids;
        reqs.push_back(std::move(r));
        idx.push_back(i);
      } catch (const Error& e) {
        out[i].error = fmt::format("judge {}: {}", id(), e.what());
      }
    }
    if (reqs.empty()) return out;
    try {
      auto res = engine_->generate(reqs, lm_.tokenizer.get());
      for (size_t k = 0; k < res.size(); ++k) {
        out[idx[k]].ok = true;
        out[idx[k]].text = res[k].text;
      }
    } catch (const Error& e) {
      for (size_t i : idx) out[i].error = fmt::format("judge {}: generation failed: {}", id(), e.what());
    }
    return out;
  }

 private:
  std::string spec_;
  graders::JudgeOptions opts_;
  LoadedModel lm_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace

std::unique_ptr<graders::Judge> make_local_judge(const std::string& model, const graders::JudgeOptions& opts) {
  return std::make_unique<LocalJudge>(model, opts);
}

}  // namespace kvb::cli
