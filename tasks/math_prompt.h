// The math prompt templates (AIME, GSM8K, MATH-500), selectable with the task option
// `template=r1|qwen|rkv|file:PATH`. Sources: docs/benchmarks.md#math;
// R-KV: Zefan-Cai/R-KV run_math.py (arXiv 2505.24133).
#pragma once

#include <string>
#include <vector>

#include "tasks/task.h"

namespace kvb::tasks {

/// "Please reason step by step, and put your final answer within \boxed{}."
extern const char* const kBoxedInstruction;
/// R-KV's user template; "{question}" is replaced by the problem text (str.replace semantics).
extern const char* const kRkvTemplate;

/// How a math problem becomes chat messages.
struct MathPrompt {
  enum class Kind {
    kR1,            ///< user: "{q}\n" + kBoxedInstruction (DeepSeek-R1 recommendation; default)
    kQwenSystem,    ///< system: kBoxedInstruction, user: "{q}" (Qwen2.5-Math qwen25-math-cot)
    kUserTemplate,  ///< user: template with "{question}" replaced (R-KV, or a user file)
  };
  Kind kind = Kind::kR1;
  std::string user_template;

  /// Parses the option value: "" or "r1", "qwen", "rkv", "file:PATH" (the file's text is the
  /// user template and must contain "{question}"). Throws kvb::Error otherwise.
  static MathPrompt from_option(const std::string& value);
  /// The chat messages for one problem.
  std::vector<ChatMessage> render(const std::string& question) const;
};

}  // namespace kvb::tasks
