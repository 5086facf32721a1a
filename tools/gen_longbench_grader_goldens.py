#!/usr/bin/env python3
"""Golden cases for the LongBench v1 metrics and the LongBench-v2 choice grader.

How to run (from the repository root):
    python3 -m venv .venv-goldens && .venv-goldens/bin/pip install rouge==1.0.1 fuzzywuzzy==0.18.0 python-Levenshtein
    .venv-goldens/bin/python tools/gen_longbench_grader_goldens.py
Writes tests/fixtures/graders/longbench_goldens.jsonl: {"metric", "pred", "gold", "all_classes"?, "score"}.

Reference: THUDM/LongBench `LongBench/metrics.py` (blob 657cf77) and the LongBench-v2 `pred.py`
extract_answer, as quoted in ../shared/reference/datasets-graders.md §9(c) and §10(c). Those files are
not on PyPI, so their small metric functions are re-typed below from that note; the heavy parts
call the real PyPI packages LongBench uses: `rouge` (pltrdy, Rouge().get_scores) and
`fuzzywuzzy` (fuzz.ratio, python-Levenshtein backend). Inputs are seeded perturbations of
hand-written answers (independent of the C++ code under test).
"""
import json
import os
import random
import re
import string
from collections import Counter

from fuzzywuzzy import fuzz
from rouge import Rouge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "graders", "longbench_goldens.jsonl")


# ---- re-typed from LongBench/metrics.py (not on PyPI) ----
def normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def f1_score(prediction, ground_truth):
    common = Counter(prediction) & Counter(ground_truth)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction)
    recall = 1.0 * num_same / len(ground_truth)
    return (2 * precision * recall) / (precision + recall)


def qa_f1_score(prediction, ground_truth):
    return f1_score(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def rouge_score(prediction, ground_truth):
    rouge = Rouge()
    try:
        scores = rouge.get_scores([prediction], [ground_truth], avg=True)
    except Exception:
        return 0.0
    return scores["rouge-l"]["f"]


def classification_score(prediction, ground_truth, all_classes):
    em_match_list = []
    for class_name in all_classes:
        if class_name in prediction:
            em_match_list.append(class_name)
    for match_term in em_match_list:
        if match_term in ground_truth and match_term != ground_truth:
            em_match_list.remove(match_term)
    if ground_truth in em_match_list:
        return 1.0 / len(em_match_list)
    return 0.0


def retrieval_score(prediction, ground_truth):
    ground_truth_id = re.findall(r"Paragraph (\d+)", ground_truth)[0]
    numbers = re.findall(r"\d+", prediction)
    right_num = sum(1 for n in numbers if str(n) == str(ground_truth_id))
    return 0.0 if len(numbers) == 0 else float(right_num / len(numbers))


def count_score(prediction, ground_truth):
    numbers = re.findall(r"\d+", prediction)
    right_num = sum(1 for n in numbers if str(n) == str(ground_truth))
    return 0.0 if len(numbers) == 0 else float(right_num / len(numbers))


def code_sim_score(prediction, ground_truth):
    all_lines = prediction.lstrip("\n").split("\n")
    prediction = ""
    for line in all_lines:
        if ("`" not in line) and ("#" not in line) and ("//" not in line):
            prediction = line
            break
    return fuzz.ratio(prediction, ground_truth) / 100


def extract_answer_v2(response):
    response = response.replace("*", "")
    match = re.search(r"The correct answer is \(([A-D])\)", response)
    if match:
        return match.group(1)
    match = re.search(r"The correct answer is ([A-D])", response)
    if match:
        return match.group(1)
    return None
# ---- end of re-typed reference code ----


ANSWERS = [
    "The Eiffel Tower", "Marie Curie and Pierre Curie", "in the year 1969", "a red apple",
    "Paris, France", "the United Nations Security Council", "an old wooden ship", "42",
    "Ludwig van Beethoven", "the mitochondria is the powerhouse of the cell",
    "He went back to the village.", "Because the bridge had collapsed!", "New York City",
    "photosynthesis", "World War II ended in 1945", "the Treaty of Versailles",
]
SUMMARIES = [
    "The report reviews federal spending on highways. It finds that costs rose by 20 percent. "
    "The agency recommends better oversight of state contracts.",
    "The meeting discussed the new product design. The team agreed on a budget. Marketing will "
    "present a plan next week.",
    "A storm hit the coast on Monday. Thousands lost power. Officials opened shelters and asked "
    "residents to stay indoors.",
    "The study measured sleep in 300 adults. Short sleep was linked to higher blood pressure. "
    "More research is needed.",
    "Tom and Anna argue about the trip. Anna wants to leave early. They decide to take the train",
]
CODE = [
    "    return self.weight * x + self.bias", "for (int i = 0; i < n; ++i) {",
    "        result.append(node.value)", "    if not os.path.exists(path):",
    "public static void main(String[] args) {", "x = np.zeros((batch, dim), dtype=np.float32)",
]
CLASSES = ["Abbreviation", "Entity", "Description", "Human being", "Location", "Numeric value",
           "Event", "Animal", "Color", "Food", "Sport", "Date", "Human", "Other location"]


def perturb(rng, text):
    words = text.split()
    op = rng.randrange(6)
    if op == 0 and len(words) > 1:
        del words[rng.randrange(len(words))]
    elif op == 1:
        words.insert(rng.randrange(len(words) + 1), rng.choice(["the", "a", "very", "Indeed,", "it"]))
    elif op == 2:
        words = [w.upper() if rng.random() < 0.3 else w for w in words]
    elif op == 3 and len(words) > 2:
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    elif op == 4:
        return text + rng.choice([".", "!", " (see above)", "\n\nMore text."])
    return " ".join(words)


def main():
    rng = random.Random(7)
    rows = []
    for i in range(40):
        g = rng.choice(ANSWERS)
        p = perturb(rng, g) if i % 4 else rng.choice(ANSWERS)
        rows.append({"metric": "qa_f1", "pred": p, "gold": g, "score": qa_f1_score(p, g)})
    for i in range(30):
        g = rng.choice(SUMMARIES)
        p = perturb(rng, perturb(rng, g)) if i % 5 else rng.choice(SUMMARIES + ["", " . ", "short"])
        if i % 7 == 0:
            p = p.replace(". ", ", ")
        rows.append({"metric": "rouge", "pred": p, "gold": g, "score": rouge_score(p, g)})
    for i in range(30):
        g = rng.choice(CLASSES)
        k = rng.randrange(3)
        picks = [g] * (k > 0) + rng.sample(CLASSES, k)
        p = "Type: " + ", ".join(picks) if picks else "I don't know"
        rows.append({"metric": "classification", "pred": p, "gold": g, "all_classes": CLASSES,
                     "score": classification_score(p, g, CLASSES)})
    for i in range(25):
        gid = rng.randrange(1, 31)
        g = f"Paragraph {gid}"
        opts = [f"Paragraph {gid}", f"Paragraph {rng.randrange(1, 31)}", f"The answer is: Paragraph {gid} and paragraph {gid + 1}",
                "I cannot tell.", f"{gid}", f"Paragraphs {gid}, {gid}, 3"]
        p = rng.choice(opts)
        rows.append({"metric": "retrieval", "pred": p, "gold": g, "score": retrieval_score(p, g)})
    for i in range(25):
        n = rng.randrange(1, 25)
        g = str(n)
        p = rng.choice([f"{n}", f"There are {n} unique paragraphs.", f"{n + 1}", f"{n} or {n + 2}", "none",
                        f"Between {n - 1} and {n}"])
        rows.append({"metric": "count", "pred": p, "gold": g, "score": count_score(p, g)})
    for i in range(30):
        g = rng.choice(CODE)
        p = perturb(rng, g) if i % 3 else rng.choice(CODE)
        if i % 4 == 0:
            p = "\n```python\n# next line\n" + p + "\n```"
        if i % 9 == 0:
            p = "// comment only"
        rows.append({"metric": "code_sim", "pred": p, "gold": g, "score": code_sim_score(p, g)})
    for i in range(25):
        g = rng.choice("ABCD")
        x = rng.choice("ABCD")
        p = rng.choice([f"The correct answer is ({x})", f"**The correct answer is {x}**", f"The correct answer is {x}.",
                        f"I think ({x}).", f"The correct answer is (E)", f"The correct answer is *({x})*"])
        got = extract_answer_v2(p)
        rows.append({"metric": "choice_v2", "pred": p, "gold": g, "extracted": got or "",
                     "score": float(got == g)})
    with open(OUT, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} cases to {OUT}")


if __name__ == "__main__":
    main()
