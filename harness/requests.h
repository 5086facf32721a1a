// Request building for `kvbench run`: a task example (tasks/task.h) on a loaded model
// (harness/model_source.h) becomes the engine's GenerationRequest — the prompt through the
// model's chat template (model_source's render_chat) or as raw text, the work item's sampling,
// caps, stops and seed, the query-agnostic context split, SCBench follow-up turns, and
// LongBench/HELMET middle truncation of prompts that do not fit the context
// (docs/benchmarks.md, docs/architecture.md#the-run-grid-and-resume).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "harness/model_source.h"
#include "tasks/task.h"

namespace kvb::cli {

/// The run-wide options that shape every request (from `kvbench run`'s command line).
struct RequestOptions {
  double min_p = 0.0;                 ///< --min-p (not part of the work item's sampling)
  std::optional<int> max_new_tokens;  ///< --max-new-tokens: caps every turn when set
  bool query_agnostic = false;        ///< --query-agnostic: split the prompt at the shared context
  bool truncate_middle = true;        ///< --truncate middle (true) or none (false)
};

/// What one work item becomes. When `error` is set the prompt does not fit the model's context
/// and the item is stored as an error row instead of being generated.
struct BuiltRequest {
  GenerationRequest request;
  int64_t truncated_from = 0;  ///< prompt tokens before middle truncation (0: not truncated)
  std::string turn_note;       ///< set when a chat template re-renders multi-turn history
  std::string error;           ///< "" or "prompt of N tokens exceeds the model's context of M"
};

/// The prompt text of `ex` on `lm` and whether it went through the chat template: the template
/// over ex.messages with a generation prompt when the model has one and ex.use_chat_template,
/// else ex.raw_prompt() (tokenized with special tokens, i.e. BOS).
struct PromptText {
  std::string text;
  bool chat = false;
};
PromptText example_prompt(const LoadedModel& lm, const tasks::Example& ex);

/// Whether the follow-ups of `ex` start from a fresh prompt built from the previous output
/// (LongBench-v2's CoT step 2: meta "fresh_context") rather than continuing the sequence.
bool fresh_context_followups(const tasks::Example& ex);

/// The generation cap of a follow-up turn: `cli_cap`, else the turn's own, else `first`.
int turn_cap(const tasks::Turn& t, std::optional<int> cli_cap, int first);

/// The follow-up turns of a shared-context multi-turn example (SCBench protocol,
/// docs/benchmarks.md#scbench) as the tokens each turn appends to the sequence: the previous
/// turn's gold answer as the assistant reply, then the next user message. With a chat template,
/// turn k appends render(messages up to user k) minus render(messages up to user k−1), both with
/// the generation prompt, so the cached tokens are exactly the conversation's (where a template
/// re-renders earlier text differently, the common prefix is kept and `*note` says so). Without
/// one, it appends gold + "\n\n" + user. Empty for single-turn and fresh-context examples.
/// Throws kvb::Error when the example wants the model's own outputs as history (not supported:
/// the engine drops generated KV).
std::vector<FollowupTurn> build_followups(const LoadedModel& lm, const tasks::Example& ex, int first_cap,
                                          std::optional<int> cli_cap, std::string* note);

/// The request of one work item: the prompt of `ex` (example_prompt), `sampling` (the work
/// item's sampling JSON: temperature, top_p, top_k, max_new_tokens; missing keys are greedy and
/// `default_max_new_tokens`), stop ids = lm.eos_ids, stop strings = ex.stop, `seed`, the
/// follow-up turns, and with query_agnostic the token count of the prompt up to the end of the
/// example's shared context (ex.context_chars into its last message). A prompt longer than the
/// context minus the room every turn needs (never below half the context) is middle-truncated
/// (truncate_middle in run_support.h) when o.truncate_middle, the context split following the
/// cut; one that still does not fit max_position_embeddings sets `error`.
/// Throws kvb::Error when the model has no tokenizer or the follow-ups cannot be built.
BuiltRequest build_request(const LoadedModel& lm, const tasks::Example& ex, const nlohmann::json& sampling,
                           int default_max_new_tokens, uint64_t seed, const RequestOptions& o);

/// The request of step `step` (0-based) of a fresh-context follow-up chain (LongBench-v2 CoT):
/// the turn's user message with every occurrence of its meta "substitute_previous_output"
/// placeholder replaced by `previous_output`, as one user message through the chat template
/// (or raw text with BOS), with the first request's sampling, the turn's cap (turn_cap), stop
/// strings and seed first.seed + step + 1; a prompt that does not fit is middle-truncated to
/// the context minus its cap (never below half the context).
GenerationRequest build_fresh_followup(const LoadedModel& lm, const tasks::Example& ex, size_t step,
                                       const std::string& previous_output, const GenerationRequest& first,
                                       std::optional<int> cli_cap);

}  // namespace kvb::cli
