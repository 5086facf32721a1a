#!/usr/bin/env python3
"""Generate the Wilson-interval goldens for kvbench's pass@1 interval (results/stats.h:
wilson_interval, pass1_wilson) from the reference implementation, statsmodels'
proportion_confint(count, nobs, alpha, method="wilson").

How to run (from the repository root):
    python3 -m venv .venv-stats && .venv-stats/bin/pip install statsmodels
    .venv-stats/bin/python tools/gen_stats_goldens.py
It writes tests/fixtures/results/wilson_goldens.json:
    {"statsmodels": <version>, "cases": [{"scores": [...], "level": L, "p": mean, "n": len,
                                          "lo": ..., "hi": ...}, ...]}
Each case is a list of per-example mean scores in [0, 1] (binary, k-of-8 sample fractions and
partial-credit values); pass@1 is their mean p, and the interval is
proportion_confint(p * n, n, alpha=1 - level, method="wilson") with n = the number of examples
(count need not be an integer). The edge cases include p = 0, p = 1, n = 2 and the issue's
"0.250 over 8" example whose Student-t interval left [0, 1].
"""
import json
import os
import random

import statsmodels
from statsmodels.stats.proportion import proportion_confint


def cases():
    out = [
        [1, 0, 0, 0, 0, 0, 1, 0],          # 0.25 over 8 (the Wald/Student-t case)
        [0, 0, 0, 0, 0],                   # p = 0
        [1, 1, 1, 1, 1, 1],                # p = 1
        [0, 1],                            # n = 2
        [0.5, 0.5],
        [0.125, 0.0, 0.25, 0.875, 1.0, 0.5, 0.375, 0.0, 0.0, 0.625],  # k-of-8 fractions
        [1] * 99 + [0],
        [0] * 199 + [1],
        [0.3333333333333333, 0.6666666666666666, 1.0],
    ]
    rng = random.Random(17)
    for n in (3, 5, 10, 20, 50, 100, 500):
        out.append([float(rng.random() < 0.3) for _ in range(n)])
        out.append([rng.randint(0, 8) / 8 for _ in range(n)])
        out.append([round(rng.random(), 6) for _ in range(n)])
    return out


def main():
    rows = []
    for i, scores in enumerate(cases()):
        for level in ((0.95, 0.9, 0.99) if i % 3 == 0 else (0.95,)):
            n = len(scores)
            p = sum(scores) / n
            lo, hi = proportion_confint(p * n, n, alpha=1 - level, method="wilson")
            rows.append({"scores": scores, "level": level, "p": p, "n": n, "lo": float(lo), "hi": float(hi)})
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "results", "wilson_goldens.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write('{"statsmodels": %s, "cases": [\n' % json.dumps(statsmodels.__version__))
        f.write(",\n".join(json.dumps(r) for r in rows))
        f.write("\n]}\n")
    print(f"wrote {len(rows)} cases to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
