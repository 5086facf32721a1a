#!/usr/bin/env python3
"""Golden judge prompts and verdicts for LongMemEval's LLM judge (graders/judge_longmemeval.cpp).

How to run (from the repository root; Python standard library only, so no virtualenv is needed):
    python3 tools/gen_longmemeval_judge_goldens.py [--note ../shared/reference/datasets-graders.md]
Writes tests/fixtures/graders/longmemeval_judge_goldens.json.

Source of truth: the five judge templates as quoted in the reference note
../shared/reference/datasets-graders.md §7(c) (from xiaowu0162/LongMemEval @9e0b455
src/evaluation/evaluate_qa.py). This script reads them out of the note itself (the backtick-quoted
lines of §7(c); the temporal-reasoning template is the default one with the quoted substring
replaced, exactly as the note describes), fills them with Python's own str.format(question,
answer, response) as evaluate_qa.py does, and labels judge replies with the reference rule
`'yes' in reply.strip().lower()`. The C++ code types the templates in independently; the test
compares both byte for byte.
"""
import argparse
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTE = os.path.join(ROOT, "..", "shared", "reference", "datasets-graders.md")
OUT = os.path.join(ROOT, "tests", "fixtures", "graders", "longmemeval_judge_goldens.json")


def unescape(s):
    """The note writes Python string escapes; only \\n occurs in these templates."""
    assert "\\" not in s.replace("\\n", ""), f"unexpected escape in {s!r}"
    return s.replace("\\n", "\n")


def templates_from_note(path):
    text = open(path, encoding="utf-8").read()
    start = text.index("### (c) Grader (src/evaluation/evaluate_qa.py)")
    end = text.index("Metrics (print_qa_metrics.py)", start)
    section = text[start:end]
    quoted = [ln.strip()[1:-1] for ln in section.splitlines()
              if ln.startswith("  `") and ln.rstrip().endswith("`")]
    assert len(quoted) == 5, f"expected 5 quoted template lines in §7(c), found {len(quoted)}"
    default, temporal_new, knowledge, preference, abstention = [unescape(q) for q in quoted]
    m = re.search(r"the template above with `(.*?)` replaced by", section)
    temporal_old = unescape(m.group(1))
    assert default.count(temporal_old) == 1
    temporal = default.replace(temporal_old, temporal_new)
    out = {
        "default": default,
        "temporal-reasoning": temporal,
        "knowledge-update": knowledge,
        "single-session-preference": preference,
        "abstention": abstention,
    }
    for name, t in out.items():
        assert t.count("{}") == 3, name
    return out


def template_for(question_type, abstention):
    # evaluate_qa.py get_anscheck_prompt: abstention overrides; the three default types share one.
    if abstention:
        return "abstention"
    if question_type in ("single-session-user", "single-session-assistant", "multi-session"):
        return "default"
    return question_type


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--note", default=NOTE)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    tmpl = templates_from_note(args.note)

    types = ["single-session-user", "single-session-assistant", "multi-session", "temporal-reasoning",
             "knowledge-update", "single-session-preference"]
    values = [
        ("Where did I go in May?", "Café Zürich", "You went to Café Zürich in May."),
        ("How many days passed between {the trip} and the concert?", "18 days. 19 days (including the last day) is also acceptable.",
         "Let me think step by step:\n1. Trip on 2023/05/01\n2. Concert on 2023/05/19\nSo {19} days."),
        ("What is my current {0} personal best?", "25:50", "Previously 27:12, now 25:50 — a {} new record."),
        ("Can you suggest a hotel for my trip?", "The user would prefer suggestions of hotels with a rooftop pool.",
         "  How about the Skyline Hotel, which has a great rooftop pool?  \n"),
    ]
    cases = []
    for i, qt in enumerate(types):
        for abst in (False, True):
            q, a, r = values[(i + abst) % len(values)]
            name = template_for(qt, abst)
            cases.append({"question_type": qt, "abstention": abst, "question": q, "answer": a, "response": r,
                          "template": name, "prompt": tmpl[name].format(q, a, r)})

    replies = ["Yes", "yes.", "YES", "  Yes\n", "Yes, the response is correct.", "No", "no", "No.", "NO, it is wrong",
               "", "   ", "The answer is yes", "eyes", "Nope", "I cannot tell.", "yEs", "Yes/No", "n o", "ye s",
               "Yés", "\u00a0yes\u00a0"]
    verdicts = [{"reply": r, "label": "yes" in r.strip().lower()} for r in replies]

    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"source": "xiaowu0162/LongMemEval @9e0b455 "
                             "src/evaluation/evaluate_qa.py (docs/benchmarks.md, LongMemEval)",
                   "templates": tmpl, "cases": cases, "verdicts": verdicts}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} prompts and {len(verdicts)} verdicts to {args.out}")


if __name__ == "__main__":
    main()
