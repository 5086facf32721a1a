// harness/requests.h: the engine requests `kvbench run` builds for task examples, on the committed
// stories260K GGUF (tests/fixtures/gguf) with SmolLM2's chat template
// (tests/fixtures/chat/smollm2_instruct). The expected prompts are the ChatML texts written out by
// hand from that template's definition (<|im_start|>role\ncontent<|im_end|>\n per message, the
// default system message when none is given, <|im_start|>assistant\n as generation prompt), then
// tokenized; the truncation expectations are LongBench's pred.py slicing written out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/util/error.h"
#include "engine/util/io.h"
#include "harness/model_source.h"
#include "harness/requests.h"

using namespace kvb;
using namespace kvb::cli;

namespace {

const std::string kFixtures = std::string(KVB_SOURCE_DIR) + "/tests/fixtures";
const std::string kDefaultSystem =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

/// stories260K (context 512) with SmolLM2's ChatML template, or without a template.
LoadedModel model(bool chat) {
  LoadedModel lm = load_model(kFixtures + "/gguf/stories260K.gguf");
  lm.chat.reset();
  if (chat) {
    auto cfg = parse_json_file(kFixtures + "/chat/smollm2_instruct/tokenizer_config.json");
    lm.chat = std::make_shared<chat::ChatTemplate>(cfg["chat_template"].get<std::string>(), "smollm2 template", "",
                                                   "<|im_end|>");
  }
  return lm;
}

tasks::Example example(const std::string& user, const std::string& system = "") {
  tasks::Example ex;
  ex.id = "t/0";
  ex.task = "t";
  if (!system.empty()) ex.messages.push_back({"system", system});
  ex.messages.push_back({"user", user});
  return ex;
}

std::vector<int32_t> encode(const LoadedModel& lm, const std::string& text, bool special) {
  return lm.tokenizer->encode(text, special);
}

}  // namespace

TEST(Requests, ChatExampleRendersThroughTheTemplateWithTheWorkItemsSampling) {
  const LoadedModel lm = model(true);
  tasks::Example ex = example("What is 2+3?", "Be brief.");
  ex.stop = {"\n\n"};
  const nlohmann::json sampling = {{"temperature", 0.6}, {"top_p", 0.95}, {"top_k", 20}, {"max_new_tokens", 32}};
  RequestOptions o;
  o.min_p = 0.05;
  const BuiltRequest b = build_request(lm, ex, sampling, 99, 7, o);
  EXPECT_EQ(b.request.prompt, encode(lm,
                                     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                                     "<|im_start|>assistant\n",
                                     false));
  EXPECT_FLOAT_EQ(b.request.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(b.request.sampling.top_p, 0.95f);
  EXPECT_EQ(b.request.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(b.request.sampling.min_p, 0.05f);
  EXPECT_EQ(b.request.max_new_tokens, 32);
  EXPECT_EQ(b.request.stop_ids, lm.eos_ids);
  EXPECT_EQ(b.request.stop_strings, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(b.request.seed, 7u);
  EXPECT_EQ(b.request.context_tokens, 0u);
  EXPECT_TRUE(b.request.followups.empty());
  EXPECT_EQ(b.truncated_from, 0);
  EXPECT_EQ(b.error, "");
  EXPECT_EQ(example_prompt(lm, ex).text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Requests, CompletionExamplesAndModelsWithoutTemplateAreRawTextWithBos) {
  // A completion task (LongBench trec, ...) ignores the template; a model without one uses raw text.
  tasks::Example ex = example("Question: 1+1?\nAnswer:", "Classify.\n");
  ex.use_chat_template = false;
  for (bool chat : {true, false}) {
    const LoadedModel lm = model(chat);
    tasks::Example e = ex;
    e.use_chat_template = chat ? false : true;
    const BuiltRequest b = build_request(lm, e, nlohmann::json::object(), 40, 1, RequestOptions{});
    const std::vector<int32_t> want = encode(lm, "Classify.\nQuestion: 1+1?\nAnswer:", true);
    EXPECT_EQ(b.request.prompt, want) << "chat model: " << chat;
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(want.front(), 1);                             // stories260K's BOS
    EXPECT_EQ(b.request.max_new_tokens, 40);                // no max_new_tokens in the sampling: the example's cap
    EXPECT_FLOAT_EQ(b.request.sampling.temperature, 0.0f);  // no sampling keys: greedy
    EXPECT_FLOAT_EQ(b.request.sampling.top_p, 1.0f);
  }
}

TEST(Requests, QueryAgnosticSplitsAtTheEndOfTheSharedContext) {
  const LoadedModel lm = model(true);
  tasks::Example ex = example("The cat sat on the mat. Where did the cat sit?");
  ex.context_chars = std::string("The cat sat on the mat.").size();
  RequestOptions o;
  o.query_agnostic = true;
  const BuiltRequest b = build_request(lm, ex, nlohmann::json::object(), 16, 0, o);
  EXPECT_EQ(b.request.prompt,
            encode(lm,
                   kDefaultSystem + "<|im_start|>user\nThe cat sat on the mat. Where did the cat sit?<|im_end|>\n"
                                    "<|im_start|>assistant\n",
                   false));
  const size_t ctx = encode(lm, kDefaultSystem + "<|im_start|>user\nThe cat sat on the mat.", false).size();
  EXPECT_EQ(b.request.context_tokens, ctx);
  EXPECT_LT(ctx, b.request.prompt.size());
  // Query-aware (the default): one prompt.
  EXPECT_EQ(build_request(lm, ex, nlohmann::json::object(), 16, 0, RequestOptions{}).request.context_tokens, 0u);
}

TEST(Requests, ScbenchFollowupsAppendGoldAnswerAndNextQuestion) {
  tasks::Example ex = example("Q1");
  ex.gold_history = "A1";
  tasks::Turn t2;
  t2.user = "Q2";
  t2.gold_history = "A2";
  t2.stop = {"###"};
  tasks::Turn t3;
  t3.user = "Q3";
  t3.max_new_tokens = 5;
  ex.followups = {t2, t3};
  {
    const LoadedModel lm = model(true);
    const BuiltRequest b = build_request(lm, ex, {{"max_new_tokens", 12}}, 99, 0, RequestOptions{});
    ASSERT_EQ(b.request.followups.size(), 2u);
    EXPECT_EQ(b.request.followups[0].append,
              encode(lm, "A1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n", false));
    EXPECT_EQ(b.request.followups[1].append,
              encode(lm, "A2<|im_end|>\n<|im_start|>user\nQ3<|im_end|>\n<|im_start|>assistant\n", false));
    EXPECT_EQ(b.request.followups[0].max_new_tokens, 12);  // no cap of its own: the first turn's
    EXPECT_EQ(b.request.followups[1].max_new_tokens, 5);   // its own cap
    EXPECT_EQ(b.request.followups[0].stop_strings, std::vector<std::string>{"###"});
    EXPECT_EQ(b.turn_note, "");  // ChatML never re-renders earlier turns
    RequestOptions o;
    o.max_new_tokens = 3;  // --max-new-tokens caps every turn
    const BuiltRequest c = build_request(lm, ex, {{"max_new_tokens", 3}}, 99, 0, o);
    EXPECT_EQ(c.request.followups[0].max_new_tokens, 3);
    EXPECT_EQ(c.request.followups[1].max_new_tokens, 3);
  }
  {
    const LoadedModel lm = model(false);
    const BuiltRequest b = build_request(lm, ex, nlohmann::json::object(), 8, 0, RequestOptions{});
    ASSERT_EQ(b.request.followups.size(), 2u);
    EXPECT_EQ(b.request.followups[0].append, encode(lm, "A1\n\nQ2", false));
    EXPECT_EQ(b.request.followups[1].append, encode(lm, "A2\n\nQ3", false));
  }
  ex.golden_history = false;
  try {
    build_request(model(true), ex, nlohmann::json::object(), 8, 0, RequestOptions{});
    ADD_FAILURE() << "the model's own outputs as history must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model's own outputs as history is not supported"), std::string::npos)
        << e.what();
  }
}

TEST(Requests, OverLongPromptsAreMiddleTruncatedOrRefused) {
  const LoadedModel lm = model(false);
  std::string text;
  for (int i = 0; i < 400; ++i) text += "word" + std::to_string(i) + " ";
  tasks::Example ex = example(text);
  const std::vector<int32_t> full = encode(lm, text, true);
  ASSERT_GT(full.size(), 512u);  // longer than stories260K's context
  const BuiltRequest b = build_request(lm, ex, nlohmann::json::object(), 100, 0, RequestOptions{});
  // limit = max(512 - 100, 512 / 2) = 412; pred.py: tokens[:206] + tokens[-206:].
  EXPECT_EQ(b.truncated_from, static_cast<int64_t>(full.size()));
  std::vector<int32_t> want(full.begin(), full.begin() + 206);
  want.insert(want.end(), full.end() - 206, full.end());
  EXPECT_EQ(b.request.prompt, want);
  EXPECT_EQ(b.error, "");
  // A cap above half the context: the limit stays at half the context (256).
  const BuiltRequest h = build_request(lm, ex, nlohmann::json::object(), 400, 0, RequestOptions{});
  EXPECT_EQ(h.request.prompt.size(), 256u);
  RequestOptions none;
  none.truncate_middle = false;
  const BuiltRequest n = build_request(lm, ex, nlohmann::json::object(), 100, 0, none);
  EXPECT_EQ(n.truncated_from, 0);
  EXPECT_EQ(n.request.prompt, full);
  EXPECT_EQ(n.error, "prompt of " + std::to_string(full.size()) + " tokens exceeds the model's context of 512");
}

TEST(Requests, FreshContextFollowupSubstitutesThePreviousOutput) {
  const LoadedModel lm = model(true);
  tasks::Example ex = example("Think step by step: 6*7?");
  tasks::Turn t;
  t.user = "Reasoning: $PREV\nSo the answer ($PREV) is";
  t.meta = {{"fresh_context", true}, {"substitute_previous_output", "$PREV"}};
  ex.followups = {t};
  EXPECT_TRUE(fresh_context_followups(ex));
  const BuiltRequest first = build_request(lm, ex, {{"temperature", 0.5}}, 20, 41, RequestOptions{});
  EXPECT_TRUE(first.request.followups.empty());  // fresh-context turns are separate prompts
  const GenerationRequest q = build_fresh_followup(lm, ex, 0, "42", first.request, std::nullopt);
  EXPECT_EQ(q.prompt, encode(lm,
                             kDefaultSystem + "<|im_start|>user\nReasoning: 42\nSo the answer (42) is<|im_end|>\n"
                                              "<|im_start|>assistant\n",
                             false));
  EXPECT_EQ(q.seed, 42u);  // first seed + step + 1
  EXPECT_FLOAT_EQ(q.sampling.temperature, 0.5f);
  EXPECT_EQ(q.max_new_tokens, 20);
  EXPECT_EQ(q.stop_ids, lm.eos_ids);
  EXPECT_EQ(build_fresh_followup(lm, ex, 0, "42", first.request, 7).max_new_tokens, 7);
}

TEST(Requests, RenderChatWithoutATemplateNamesTheMissingKey) {
  LoadedModel lm = model(false);
  try {
    render_chat(lm, {{"user", "hi"}});
    ADD_FAILURE() << "expected a kvb::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.chat_template: missing"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
}
