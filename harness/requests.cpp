// Request building for `kvbench run`; see harness/requests.h.
#include "harness/requests.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/util/error.h"
#include "harness/run_support.h"

namespace kvb::cli {

namespace {

std::vector<chat::Message> chat_messages(const tasks::Example& ex) {
  std::vector<chat::Message> msgs;
  for (const auto& m : ex.messages) msgs.push_back({m.role, m.content});
  return msgs;
}

const tok::Tokenizer& tokenizer_of(const LoadedModel& lm) {
  if (!lm.tokenizer) fail("--model {}: no tokenizer.json, cannot tokenize a task's prompt", lm.id);
  return *lm.tokenizer;
}

SamplingParams engine_sampling(const nlohmann::json& s, double min_p) {
  SamplingParams p;
  p.temperature = static_cast<float>(s.value("temperature", 0.0));
  p.top_p = static_cast<float>(s.value("top_p", 1.0));
  p.top_k = s.value("top_k", 0);
  p.min_p = static_cast<float>(min_p);
  return p;
}

/// Prompt tokens up to the end of the shared context (ex.context_chars into the last message)
/// in the rendered prompt; 0 when the example has none or it cannot be located.
size_t context_tokens(const LoadedModel& lm, const tasks::Example& ex, const PromptText& p, size_t prompt_size) {
  if (ex.context_chars == 0 || ex.messages.empty()) return 0;
  const std::string& last = ex.messages.back().content;
  const size_t at = p.text.rfind(last);
  if (at == std::string::npos || ex.context_chars > last.size()) return 0;
  const size_t n = tokenizer_of(lm).encode(p.text.substr(0, at + ex.context_chars), !p.chat).size();
  return std::min(n, prompt_size - 1);
}

}  // namespace

PromptText example_prompt(const LoadedModel& lm, const tasks::Example& ex) {
  if (lm.chat && ex.use_chat_template) return {render_chat(lm, chat_messages(ex)), true};
  return {ex.raw_prompt(), false};
}

bool fresh_context_followups(const tasks::Example& ex) {
  return !ex.followups.empty() && ex.followups.front().meta.value("fresh_context", false);
}

int turn_cap(const tasks::Turn& t, std::optional<int> cli_cap, int first) {
  return cli_cap ? *cli_cap : (t.max_new_tokens > 0 ? t.max_new_tokens : first);
}

std::vector<FollowupTurn> build_followups(const LoadedModel& lm, const tasks::Example& ex, int first_cap,
                                          std::optional<int> cli_cap, std::string* note) {
  std::vector<FollowupTurn> out;
  if (ex.followups.empty() || fresh_context_followups(ex)) return out;
  if (!ex.golden_history)
    fail(
        "task {}: example {}: multi-turn with the model's own outputs as history is not supported "
        "(the SCBench default is the gold answers)",
        ex.task, ex.id);
  const tok::Tokenizer& tok = tokenizer_of(lm);
  const bool chat = lm.chat && ex.use_chat_template;
  std::vector<chat::Message> msgs = chat_messages(ex);
  std::string prev = chat ? render_chat(lm, msgs) : std::string();
  std::string gold = ex.gold_history;
  for (const auto& t : ex.followups) {
    FollowupTurn f;
    if (chat) {
      msgs.push_back({"assistant", gold});
      msgs.push_back({"user", t.user});
      std::string cur = render_chat(lm, msgs);
      size_t common = 0;
      while (common < prev.size() && common < cur.size() && prev[common] == cur[common]) ++common;
      if (common < prev.size() && note->empty())
        *note = fmt::format(
            "the chat template re-renders the history of turn {} from character {} on; the cache "
            "keeps the earlier rendering",
            out.size() + 1, common);
      f.append = tok.encode(cur.substr(common), false);
      prev = std::move(cur);
    } else {
      f.append = tok.encode(gold + "\n\n" + t.user, false);
    }
    f.max_new_tokens = turn_cap(t, cli_cap, first_cap);
    f.stop_strings = t.stop;
    out.push_back(std::move(f));
    gold = t.gold_history;
  }
  return out;
}

BuiltRequest build_request(const LoadedModel& lm, const tasks::Example& ex, const nlohmann::json& sampling,
                           int default_max_new_tokens, uint64_t seed, const RequestOptions& o) {
  BuiltRequest b;
  GenerationRequest& r = b.request;
  const PromptText p = example_prompt(lm, ex);
  r.prompt = tokenizer_of(lm).encode(p.text, /*add_special_tokens=*/!p.chat);
  r.sampling = engine_sampling(sampling, o.min_p);
  r.max_new_tokens = sampling.value("max_new_tokens", default_max_new_tokens);
  r.stop_ids = lm.eos_ids;
  r.stop_strings = ex.stop;
  r.seed = seed;
  if (o.query_agnostic) r.context_tokens = context_tokens(lm, ex, p, r.prompt.size());
  r.followups = build_followups(lm, ex, r.max_new_tokens, o.max_new_tokens, &b.turn_note);

  // Over-long prompts: middle truncation to the context minus the room every turn needs (never
  // below half the context), as LongBench (pred.py) and HELMET do; --truncate none stores
  // prompts that do not fit the context as errors instead.
  const int64_t max_ctx = lm.model->config().max_position_embeddings;
  int64_t reserve = r.max_new_tokens;
  for (const auto& f : r.followups) reserve += static_cast<int64_t>(f.append.size()) + f.max_new_tokens;
  const int64_t prompt_limit = std::max<int64_t>(max_ctx - reserve, max_ctx / 2);
  if (static_cast<int64_t>(r.prompt.size()) > prompt_limit && o.truncate_middle && prompt_limit >= 2) {
    b.truncated_from = static_cast<int64_t>(r.prompt.size());
    r.prompt = truncate_middle(r.prompt, static_cast<size_t>(prompt_limit));
    // The context split follows the cut: kept head, removed middle, kept tail.
    const size_t half = static_cast<size_t>(prompt_limit) / 2;
    const size_t removed = static_cast<size_t>(b.truncated_from) - 2 * half;
    if (r.context_tokens > half)
      r.context_tokens = r.context_tokens >= half + removed ? r.context_tokens - removed : half;
  }
  if (static_cast<int64_t>(r.prompt.size()) >= max_ctx)
    b.error = fmt::format("prompt of {} tokens exceeds the model's context of {}", r.prompt.size(), max_ctx);
  return b;
}

GenerationRequest build_fresh_followup(const LoadedModel& lm, const tasks::Example& ex, size_t step,
                                       const std::string& previous_output, const GenerationRequest& first,
                                       std::optional<int> cli_cap) {
  const tasks::Turn& t = ex.followups.at(step);
  std::string user = t.user;
  const std::string ph = t.meta.value("substitute_previous_output", std::string());
  if (!ph.empty())
    for (size_t p = user.find(ph); p != std::string::npos; p = user.find(ph, p + previous_output.size()))
      user.replace(p, ph.size(), previous_output);
  GenerationRequest q;
  if (lm.chat && ex.use_chat_template) q.prompt = tokenizer_of(lm).encode(render_chat(lm, {{"user", user}}), false);
  else q.prompt = tokenizer_of(lm).encode(user, true);
  q.sampling = first.sampling;
  q.max_new_tokens = turn_cap(t, cli_cap, first.max_new_tokens);
  q.stop_ids = lm.eos_ids;
  q.stop_strings = t.stop;
  q.seed = first.seed + step + 1;
  const int64_t max_ctx = lm.model->config().max_position_embeddings;
  if (static_cast<int64_t>(q.prompt.size()) >= max_ctx)
    q.prompt = truncate_middle(q.prompt, static_cast<size_t>(std::max<int64_t>(max_ctx - q.max_new_tokens, max_ctx / 2)));
  return q;
}

}  // namespace kvb::cli
