// LongBench v1 metrics and the LongBench-v2 multiple-choice grader.
//
// Source: docs/benchmarks.md#longbench and #longbench-v2 (THUDM/LongBench @2e00731
// `LongBench/metrics.py` blob 657cf77, `eval.py`; LongBench-v2 `pred.py` extract_answer).
// Each function scores ONE (prediction, ground truth) pair in [0, 1]; the dataset score is the
// max over the example's answers (the registry's graders do that), ×100 and averaged by the
// caller.
// Text is treated as bytes except where noted: lowercasing and punctuation are ASCII (Python's
// str.lower / string.punctuation agree on ASCII text); edit similarity counts Unicode code points.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvb::graders {

/// SQuAD/LongBench normalize_answer: lowercase → delete ASCII punctuation → articles
/// (a|an|the as whole words) → space → collapse whitespace.
std::string normalize_answer(std::string_view s);

/// LongBench qa_f1_score: bag-of-words F1 of the normalised whitespace tokens (0 if no overlap).
double qa_f1(std::string_view prediction, std::string_view ground_truth);

/// Character-level F1 for Chinese (SCBench qa_chn / our LongBench qa_f1_zh): lowercase, delete
/// ASCII + CJK punctuation and all whitespace, tokens = code points, bag F1. LongBench itself
/// segments with jieba (no maintained C++ port in Debian), so for multifieldqa_zh this differs.
double qa_f1_chars(std::string_view prediction, std::string_view ground_truth);

/// Most words a side of rouge_l (after splitting into sentences and words) may have; a longer
/// side scores 0. The LCS of every sentence pair is reconstructed from a table of
/// (words+1)² bits, so this bounds the memory (8 MiB) and time (~10^8 cells) of one grade. The
/// reference scores 0 earlier still: the package reconstructs the LCS recursively, Python
/// raises RecursionError past ~1000 steps (a sentence pair of ~1000 words without a period),
/// and LongBench's `rouge_score` catches it and returns 0. LongBench generates at most 512
/// tokens for its summarisation tasks.
inline constexpr size_t kRougeMaxWords = 8192;

/// LongBench rouge_score: ROUGE-L F of the pltrdy `rouge` 1.0.1 package, summary level,
/// exclusive (set) mode: sentences split on '.', words on ' ', union-LCS over word sets, F =
/// 2PR/(P+R+1e-8). An empty hypothesis or reference scores 0 (the package raises, LongBench
/// catches), and so does a side of more than kRougeMaxWords words. Not replicated: Python's
/// recursion limit on >~1000-word period-free sentences (scores 0 there).
double rouge_l(std::string_view prediction, std::string_view ground_truth);

/// LongBench rouge_zh_score on characters: rouge_l of the code points of each side joined by
/// spaces (so kRougeMaxWords counts characters; LongBench joins jieba words; like qa_f1_zh, kvbench segments Chinese by characters,
/// so scores differ from published jieba-based numbers — tools/gen_longbench_grader_goldens.py
/// stores both). Invalid UTF-8 decodes to U+FFFD.
double rouge_l_chars(std::string_view prediction, std::string_view ground_truth);

/// LongBench classification_score (trec, lsht): classes of `all_classes` found as substrings of
/// the prediction, minus those that are proper substrings of the gold (with the reference's
/// skip-after-remove iteration); 1/len(matches) if the gold is among them, else 0.
double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes);

/// LongBench retrieval_score: gold id = first "Paragraph (\d+)" (zh: "段落(\d+)") of the gold;
/// fraction of the prediction's integers equal to it (0 if it has none). Throws kvb::Error when
/// the gold has no paragraph id.
double retrieval_score(std::string_view prediction, std::string_view ground_truth, bool chinese = false);

/// LongBench count_score: fraction of the prediction's integers equal to the gold string.
double count_score(std::string_view prediction, std::string_view ground_truth);

/// LongBench code_sim_score: first line of the prediction (leading newlines stripped) without
/// '`', '#' or '//' (else ""), scored by fuzzywuzzy `fuzz.ratio` with python-Levenshtein:
/// round-half-even(100 × 2·LCS/(len1+len2)) over code points (100 if equal, 0 if one is empty), /100.
double code_sim_score(std::string_view prediction, std::string_view ground_truth);

/// Most (code points of a) × (code points of b) fuzz_ratio computes: the LCS takes that many
/// steps (two 115 KB lines took 58 s). Past it the ratio is 0, unless the strings are equal.
/// python-Levenshtein has no limit; LongBench generates at most 64 tokens for lcc and
/// repobench-p, whose golds are one line of code.
inline constexpr double kFuzzRatioMaxCells = 1 << 28;

/// fuzzywuzzy fuzz.ratio (python-Levenshtein backend) of two strings, 0–100 integer; 0 past
/// kFuzzRatioMaxCells.
int fuzz_ratio(std::string_view a, std::string_view b);

/// LongBench-v2 extract_answer: delete '*', then "The correct answer is (X)" else
/// "The correct answer is X" (X in A–D); nullopt when neither matches.
std::optional<char> extract_choice_v2(std::string_view response);

}  // namespace kvb::graders
