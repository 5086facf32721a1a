// SCBench per-task scorers (microsoft/MInference @fb56c917 `scbench/compute_scores.py`,
// `scbench/repo_qa_utils.py`; arXiv 2412.10319). Algorithms: docs/benchmarks.md#scbench.
//
// Each function scores ONE turn's prediction against that turn's label(s); the task score is
// the mean per turn index over sessions, ×100 (done by the caller). Labels are read the
// "correct" way (tasks/scbench.cpp): a stored list → its items; a stored string → ONE label.
// The reference iterates over a string label's characters for qa_chn/many_shot (see
// docs/benchmarks.md#scbench); that quirk is not reproduced.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvb::graders {

/// kv_retrieval (kv, prefix_suffix, kv part of repoqa_and_kv): 1 iff `label` is a substring of the prediction.
double scbench_kv_retrieval(std::string_view prediction, std::string_view label);

/// string_match_all (vt): fraction of labels found (case-insensitively) in the prediction,
/// rounded to 2 decimals as Python's round(x, 2). Empty `labels` → 0.
double scbench_string_match_all(std::string_view prediction, const std::vector<std::string>& labels);

/// longdialogue_qa_eng (qa_eng, many_shot): 1 iff some label.upper() is a substring of
/// prediction.strip().upper().
double scbench_qa_eng(std::string_view prediction, const std::vector<std::string>& labels);

/// longbook_choice_eng: `labels` = [option text, option letter]. First character in A–D decides;
/// else the whole answer equal to a label; else an "answer is:"/"answer:"/"answer is"/"option is"
/// prefix followed by a label; else the first whitespace token that is a substring of "ABCD".
double scbench_choice_eng(std::string_view prediction, const std::vector<std::string>& labels);

/// longbook_qa_chn: character-level F1 (LongBench normalize_zh_answer), max over labels.
double scbench_qa_chn(std::string_view prediction, const std::vector<std::string>& labels);

/// math_find: the first number `\d+\.\d+|\d+` of the prediction; an integer label compares
/// int(float(x)), a non-integer label float(x). 0 when there is no number.
double scbench_math_find(std::string_view prediction, double label, bool label_is_int);

/// passkey: the first run of ASCII digits in the prediction equals `label` (as text).
double scbench_passkey(std::string_view prediction, std::string_view label);

/// rougeLsum F-measure of Google's rouge_score (what HF `evaluate.load("rouge")` computes):
/// sentences split on '\n' (empty ones dropped), tokens = lowercase [a-z0-9]+ runs, no
/// stemming, summary-level union LCS with per-token hit budgets.
double scbench_rouge_lsum(std::string_view prediction, std::string_view reference);

/// nltk sentence_bleu([reference_tokens], candidate_tokens, smoothing=method4) with tokens =
/// re.split(r"\s+", text.strip()) — RepoQA's compute_function_similarity.
double scbench_function_bleu(std::string_view candidate, std::string_view reference);

/// RepoQA's sanitize_output without tree-sitter: the first ```-fenced block (fence lines at
/// line starts, optional language tag) of the stripped output, else the whole stripped output.
/// Deviation: the reference then keeps only the first function tree-sitter finds in a block.
std::string scbench_repoqa_sanitize(std::string_view model_output);

/// One needle of a repository: the function name and its code.
struct RepoQaNeedle {
  std::string name;
  std::string code;
};

/// RepoQA verdict for one output.
struct RepoQaResult {
  bool pass = false;           ///< best-matching needle is the target and BLEU ≥ threshold
  std::string best_name;       ///< needle with the highest BLEU (first on ties; "" if all 0)
  double best_similarity = 0;  ///< its BLEU
  std::string sanitized;       ///< the code compared
};

/// needle_evaluator + pass@1 at `threshold` (0.8): BLEU of the sanitized output against every
/// needle of the repository; pass iff the strictly best one is `target_name` and its BLEU ≥ threshold.
RepoQaResult scbench_repoqa(std::string_view model_output, std::string_view target_name,
                            const std::vector<RepoQaNeedle>& needles, double threshold = 0.8);

}  // namespace kvb::graders
