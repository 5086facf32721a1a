// Math answer extraction, normalisation and equivalence (GSM8K, MATH-500, AIME).
//
// Source: docs/benchmarks.md#math — Qwen2.5-Math `extract_answer`,
// `strip_string` (§5.2, applied in the documented order) and `math_equal` (§5.4): exact string
// → numeric (fractions, scientific notation, percent; relative tolerance 1e-4) → structural
// (intervals, tuples, sets, matrices, equations) + symbolic with GiNaC. The symbolic stage runs in
// a forked child under a wall-clock limit, so a pathological input (9^{9^{9^9}}) cannot hang a run:
// it scores 0 with reason "timeout".
//
// Agreement with Hugging Face Math-Verify is measured by tests/graders (≥ 99 % on the
// committed cases of tests/fixtures/graders/math_goldens.jsonl; known disagreements are listed
// with reasons in tests/fixtures/graders/math_known_disagreements.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "graders/grade.h"

namespace kvb::graders {

/// Content of the last `\boxed{...}` or `\fbox{...}` in `text` (brace-balanced; `\boxed 5`
/// form: up to the next `$` or the end). nullopt when there is no box or its braces never close.
std::optional<std::string> last_boxed(std::string_view text);

/// Qwen2.5-Math `extract_answer` before normalisation: Minerva "final answer is $X$. I hope",
/// else the last box, else text after "he answer is" / "final answer is" / "答案是", else the
/// last number (`-?\d*\.?\d+`, commas removed); then newlines+indent removed, a leading ':' and a
/// trailing '.' or '/' dropped. Empty when nothing is found.
std::string extract_math_answer(std::string_view text);

/// Qwen2.5-Math `strip_string` (§5.2) in the documented order. One deliberate deviation: the
/// unit-word list omits Qwen's single letters (a, t, h, o, s, c, d, g, l, m, ...) and words that are
/// LaTeX command names (pm, th, ...), and a unit is never removed right after a backslash — the
/// original deletes variables from algebraic answers ("(a+5)(b+2)" → "(+5)(b+2)", "1\pm\sqrt{19}"
/// → "1\\sqrt{19}").
/// `drop_short_lhs` = Qwen step 13 ("k = v" with a lhs of at most 2 characters → "v"); false keeps
/// equations whole (used for the equation retry of grade_math).
std::string strip_math_string(std::string_view s, bool drop_short_lhs = true);

/// Options of the math equivalence check.
struct MathOptions {
  double rel_tol = 1e-4;      ///< numeric relative tolerance (Qwen `math.isclose(rel_tol=1e-4)`)
  double time_limit_s = 3.0;  ///< wall-clock limit of the structural/symbolic stage (Qwen: 3 s)
  bool percent = true;        ///< also accept gold×100 and gold/100 (Qwen include_percentage)
};

/// Verdict of `math_equivalent`: equal or not, and the stage that decided.
struct MathVerdict {
  bool equal = false;
  std::string reason;  ///< e.g. "exact", "numeric", "symbolic: difference simplifies to 0", "timeout"
};

/// Whether two *normalised* answers (outputs of strip_math_string) are equivalent:
/// exact (case-insensitive) → numeric → structural/symbolic (GiNaC, forked child under
/// opt.time_limit_s). Asymmetric only in the percent rule (variants of the gold are tried).
MathVerdict math_equivalent(const std::string& pred_norm, const std::string& gold_norm, const MathOptions& opt = {});

/// Parses a plain number: integer/decimal with optional thousands commas, scientific notation
/// (1.5e3, 1.5\times10^{3}), a fraction a/b or \frac{a}{b} with integer parts, leading sign.
/// nullopt otherwise.
std::optional<double> parse_plain_number(std::string_view s);

/// MATH-500 style grade: extract from `prediction`, normalise both, `math_equivalent`. When that
/// fails and either side is an equation, the check is retried on forms that keep the equations'
/// left-hand sides (so "2x+3=y" matches "y = 2x + 3" and "5 = x" matches "x=5").
Grade grade_math(std::string_view prediction, std::string_view gold, const MathOptions& opt = {});

/// AIME: the extracted answer must be an integer 0–999 equal to int(gold) ("025" == 25).
Grade grade_aime(std::string_view prediction, std::string_view gold);

/// GSM8K: gold may be a full solution ending in "#### N" (text after the last "####", commas
/// removed) or a bare number; prediction extracted as for math and compared numerically
/// (rel tol 1e-4).
Grade grade_gsm8k(std::string_view prediction, std::string_view gold);

}  // namespace kvb::graders
