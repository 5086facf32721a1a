#!/usr/bin/env python3
"""Generate the math-grader golden cases: (prediction, gold) pairs over MATH-500's answer types,
with verdicts from Hugging Face Math-Verify (the reference; docs/benchmarks.md,
Math).

How to run (from the repository root; needs the test data's datasets/math500/test.jsonl, which
configuring the build unpacks from tests/data into build/test-data):
    python3 -m venv .venv-goldens && .venv-goldens/bin/pip install math-verify==0.9.0
    .venv-goldens/bin/python tools/gen_math_grader_goldens.py
It writes tests/fixtures/graders/math_goldens.jsonl, one JSON object per line:
    {"gold": <MATH-500 answer>, "pred": <model output text>, "kind": <rewrite rule>,
     "math_verify": true|false}
The gold is parsed as lighteval does for MATH-500: "\\boxed{gold}" with
LatexExtractionConfig(boxed_match_priority=0); the prediction with the default configs
(LatexExtractionConfig(), ExprExtractionConfig()); verdict = verify(gold, pred) (gold first).

The rewrites are rule-based (below), seeded, and independent of the C++ grader under test.
"""
import json
import os
import random
import re
import sys
from fractions import Fraction

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

import goldens_env

OUT = os.path.join(goldens_env.ROOT, "tests", "fixtures", "graders", "math_goldens.jsonl")

WRAPS = [
    "The answer is $\\boxed{{{}}}$.",
    "Therefore, the final answer is \\boxed{{{}}}.",
    "We simplify step by step and get \\[\\boxed{{{}}}\\]",
    "\\boxed{{{}}}",
]

INT_RE = re.compile(r"^-?\d+$")
FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\s*\{?(\d+)\}?\s*\{?(\d+)\}?$")
DEC_RE = re.compile(r"^-?\d*\.\d+$")


def rewrites(g, rng, all_golds):
    """Yields (pred_answer, kind) for one gold answer string."""
    s = g.strip()
    yield s, "same"
    nospace = s.replace(" ", "")
    if nospace != s:
        yield nospace, "no_spaces"
    if "\\dfrac" in s:
        yield s.replace("\\dfrac", "\\frac"), "dfrac_to_frac"
    elif "\\frac" in s:
        yield s.replace("\\frac", "\\dfrac"), "frac_to_dfrac"
    if "\\left" in s:
        yield s.replace("\\left", "").replace("\\right", ""), "drop_left_right"
    if re.search(r"=", s) and "\\" not in s and "," not in s:
        lhs, rhs = s.split("=")
        yield f"{rhs.strip()} = {lhs.strip()}", "equation_sides_swapped"
        yield f"2({lhs.strip()}) = 2({rhs.strip()})", "equation_scaled"
    if INT_RE.match(s):
        n = int(s)
        if 0 < n <= 100:
            yield f"{n}\\%", "int_as_percent"
        yield f"{n}.0", "int_as_decimal"
        if abs(n) >= 1000:
            yield f"{n:,}", "int_with_commas"
        yield str(n + 1), "wrong_int_plus_one"
        if n != 0:
            yield str(-n), "wrong_int_negated"
        yield f"x = {n}", "int_as_equation"
        return
    m = FRAC_RE.match(s.replace(" ", ""))
    if m:
        sign, a, b = m.group(1), int(m.group(2)), int(m.group(3))
        fr = Fraction(a, b) * (-1 if sign else 1)
        yield f"{sign}{a}/{b}", "frac_as_slash"
        yield f"\\frac{{{sign}{a}}}{{{b}}}" if sign else f"\\frac{{{2 * a}}}{{{2 * b}}}", "frac_sign_or_unreduced"
        d = fr.denominator
        while d % 2 == 0:
            d //= 2
        while d % 5 == 0:
            d //= 5
        if d == 1:
            yield str(float(fr)), "frac_as_exact_decimal"
        else:
            yield f"{float(fr):.6f}", "frac_as_6digit_decimal"
            yield f"{float(fr):.2f}", "wrong_frac_as_2digit_decimal"
        yield f"{sign}\\frac{{{a + 1}}}{{{b}}}", "wrong_frac_numerator"
        yield f"\\frac{{{b}}}{{{a}}}", "wrong_frac_inverted"
        return
    if DEC_RE.match(s):
        fr = Fraction(s)
        yield f"\\frac{{{fr.numerator}}}{{{fr.denominator}}}", "decimal_as_frac"
        yield ("0" + s) if s.startswith(".") else s + "0", "decimal_padded"
        yield str(float(fr) * 100).rstrip("0").rstrip(".") + "\\%", "decimal_as_percent"
        yield str(float(fr) + 0.1), "wrong_decimal"
        return
    if "^\\circ" in s:
        base = s.replace("^\\circ", "").strip()
        yield base, "degrees_dropped"
        yield base + "^{\\circ}", "degrees_braced"
        yield base + " degrees", "degrees_word"
        if INT_RE.match(base):
            yield str(int(base) + 10) + "^\\circ", "wrong_degrees"
        return
    if "\\pi" in s:
        if re.search(r"\d\s*\\pi", s):
            yield re.sub(r"(\d)\s*\\pi", r"\1 \\cdot \\pi", s), "pi_explicit_product"
        m2 = re.match(r"^(\d+)\s*\\pi$", s)
        if m2:
            k = int(m2.group(1))
            yield f"{k * 3.141592653589793:.4f}", "pi_decimal_4_places"
            yield f"\\pi \\cdot {k}", "pi_reordered"
            yield f"{k + 1}\\pi", "wrong_pi_coefficient"
            yield str(k), "wrong_pi_dropped"
        return
    if "\\sqrt" in s and "," not in s and "\\pm" not in s:
        m3 = re.match(r"^(\d*)\s*\\sqrt\{?(\d+)\}?$", s)
        if m3:
            k = int(m3.group(1) or 1)
            r = int(m3.group(2))
            yield f"\\sqrt{{{k * k * r}}}", "root_combined"
            yield f"{k * r ** 0.5:.6f}", "root_decimal_6_places"
            yield f"\\frac{{{k * r}}}{{\\sqrt{{{r}}}}}", "root_unrationalised"
            yield f"{k}\\cdot\\sqrt{{{r}}}", "root_explicit_product"
            yield f"{k}\\sqrt{{{r + 1}}}", "wrong_root_radicand"
            return
        yield s.replace("\\sqrt{", "\\sqrt {"), "root_spaced"
        yield s.replace("\\sqrt", "2\\sqrt", 1), "wrong_root_doubled"
        return
    if s.startswith("\\text{"):
        inner = s[len("\\text{"):-1]
        yield inner, "text_unwrapped"
        yield f"\\textbf{{{inner}}}", "text_bold"
        other = rng.choice([x for x in all_golds if x.startswith("\\text{") and x != s])
        yield other, "wrong_other_text"
        return
    if s.startswith("\\begin{pmatrix}"):
        yield s.replace("pmatrix", "bmatrix"), "matrix_bmatrix"
        yield re.sub(r"(-?\d+)/(\d+)", r"\\frac{\1}{\2}", s), "matrix_fracs"
        nums = re.findall(r"-?\d+", s)
        if nums:
            yield s.replace(nums[0], str(int(nums[0]) + 1), 1), "wrong_matrix_entry"
        return
    if s.startswith(("(", "[", "\\left(", "\\left[")) and "," in s:
        opened = s.lstrip("\\left")
        if s[0] == "(" and s.endswith(")") and "\\cup" not in s:
            yield "[" + s[1:-1] + "]", "wrong_bracket_changed"
            parts = s[1:-1].split(",")
            if len(parts) >= 2 and parts[0].strip() != parts[1].strip():
                yield "(" + ",".join([parts[1], parts[0]] + parts[2:]) + ")", "wrong_tuple_swapped"
        yield s.replace(",", ", ").replace("  ", " "), "tuple_spaced"
        del opened
        return
    if "," in s and "\\pm" not in s:
        parts = [p.strip() for p in s.split(",")]
        if all(re.match(r"^-?\d+$", p) for p in parts):
            yield ", ".join(reversed(parts)), "list_reversed"
            yield "\\{" + ",".join(parts) + "\\}", "list_as_set"
            yield ", ".join(parts[:-1]), "wrong_list_missing"
            return
    if "\\pm" in s:
        yield s.replace("\\pm", "+") + ", " + s.replace("\\pm", "-"), "pm_expanded"
        yield s.replace("\\pm", "+"), "wrong_pm_half"
        return
    if re.search(r"_\{?\d+\}?$", s):
        m4 = re.match(r"^(\d+)_\{?(\d+)\}?$", s)
        if m4:
            yield f"{m4.group(1)}_{{{m4.group(2)}}}", "base_braced"
            yield f"{int(m4.group(1)) + 1}_{m4.group(2)}", "wrong_base_digits"
            return
    if "\\$" in s:
        yield s.replace("\\$", "").replace(",\\!", ","), "dollar_dropped"
        yield s.replace("\\$", "\\$ "), "dollar_spaced"
        return
    if "\\text{" in s or "\\mbox{" in s:
        yield re.sub(r"\\(text|mbox)\{[^}]*\}(\^\d)?", "", s).strip(), "unit_dropped"
        return
    if re.search(r"[a-z]", s.replace("\\", "")):
        # Polynomials / expressions: reorder the top-level terms, change a coefficient.
        terms = re.findall(r"[+-]?\s*[^+-]+", s.replace(" ", ""))
        if len(terms) >= 2 and not re.search(r"[=(\[\\{]", s):
            rev = "+".join(t.lstrip("+") for t in reversed(terms)).replace("+-", "-")
            yield rev, "terms_reordered"
        if re.search(r"\d", s):
            yield re.sub(r"\d+", lambda mm: str(int(mm.group()) + 1), s, count=1), "wrong_coefficient"
        other = rng.choice(all_golds)
        if other != s:
            yield other, "wrong_other_answer"
        return
    other = rng.choice(all_golds)
    if other != s:
        yield other, "wrong_other_answer"


def main():
    data = goldens_env.test_data("datasets/math500/test.jsonl")
    if not os.path.exists(data):
        sys.exit(f"missing {data}")
    golds = []
    for line in open(data, encoding="utf-8"):
        a = json.loads(line)["answer"]
        if a not in golds:
            golds.append(a)
    rng = random.Random(20240601)
    gold_cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    pred_cfg = [LatexExtractionConfig(), ExprExtractionConfig()]
    seen = set()
    rows = []
    for g in golds:
        for pred_ans, kind in rewrites(g, rng, golds):
            if (g, pred_ans) in seen:
                continue
            seen.add((g, pred_ans))
            wrap = WRAPS[len(rows) % len(WRAPS)]
            pred = wrap.format(pred_ans)
            gp = parse("\\boxed{" + g + "}", extraction_config=gold_cfg)
            pp = parse(pred, extraction_config=pred_cfg)
            ok = bool(verify(gp, pp))
            rows.append({"gold": g, "pred": pred, "kind": kind, "math_verify": ok})
    # A few fallback (no \boxed) predictions, as chat models often write them.
    for g in golds:
        if INT_RE.match(g) and rng.random() < 0.15:
            for pred, kind in ((f"So the final answer is {g}.", "fallback_final_answer"),
                               (f"Adding these gives {int(g) + 3}, so we get {g}", "fallback_last_number")):
                gp = parse("\\boxed{" + g + "}", extraction_config=gold_cfg)
                pp = parse(pred, extraction_config=pred_cfg)
                rows.append({"gold": g, "pred": pred, "kind": kind, "math_verify": bool(verify(gp, pp))})
    with open(OUT, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    n_eq = sum(r["math_verify"] for r in rows)
    print(f"wrote {len(rows)} cases ({n_eq} equivalent) to {OUT}")


if __name__ == "__main__":
    main()
