#!/usr/bin/env python3
"""Compares two `kvbench run` result databases of the same grid, cell by cell (tools/gpu_check.sh, step
`grid`: `--backend cuda` against `--backend cpu-bf16`, issue 30).

Usage: grid_compare.py A.db B.db [--label-a cuda] [--label-b cpu-bf16]

Work items are matched by (model_id, task, policy_label, budget, example_id, sample_index): the
item keys hash the same grid, so both runs must hold the same set. For every item the generated
text, the generated token count, the finish reason, the evictions and the KV byte counts
(kv_bytes_peak, kv_bytes_final, kv_bytes_read_step, and any other column named kv_bytes_* present
in both databases) must be equal. Timings and device memory are not compared.

Prints one line per policy (items, equal, first difference) and a final line
"grid: PASS" or "grid: FAIL (<why>)"; exits 0 on PASS, 1 on FAIL, 2 on unusable input (a missing
file, no generations, different grids). Needs only the Python standard library (sqlite3).
"""
import argparse
import os
import sqlite3
import sys

EQUAL_COLUMNS = ["text", "generated_tokens", "finish_reason", "evictions"]


def load(path):
    """{(model, task, policy_label, budget, example, sample): {column: value}} of a result DB."""
    if not os.path.isfile(path):
        print(f"grid: FAIL ({path}: no such file)")
        sys.exit(2)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    gen_cols = [r[1] for r in con.execute("PRAGMA table_info(generations)")]
    cols = [c for c in EQUAL_COLUMNS if c in gen_cols] + sorted(c for c in gen_cols if c.startswith("kv_bytes_"))
    sel = ", ".join(f"g.{c}" for c in cols)
    rows = con.execute(
        "SELECT w.model_id, w.task, w.policy_label, w.budget, w.example_id, w.sample_index, "
        f"{sel} FROM generations g JOIN work_items w ON w.item_key = g.item_key").fetchall()
    devices = [r[0] for r in con.execute("SELECT backend || ': ' || device FROM runs")]
    con.close()
    out = {}
    for r in rows:
        out[tuple(r[:6])] = dict(zip(cols, r[6:]))
    return out, cols, devices


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--label-a", default="cuda")
    ap.add_argument("--label-b", default="cpu-bf16")
    args = ap.parse_args()
    a, cols_a, dev_a = load(args.a)
    b, cols_b, dev_b = load(args.b)
    print(f"{args.label_a}: {args.a} ({'; '.join(dev_a)}), {len(a)} generations")
    print(f"{args.label_b}: {args.b} ({'; '.join(dev_b)}), {len(b)} generations")
    if not a or not b:
        print("grid: FAIL (a database holds no generations)")
        return 2
    if set(a) != set(b):
        only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
        print(f"grid: FAIL (different grids: {only_a} items only in {args.label_a}, {only_b} only in {args.label_b})")
        return 2
    cols = [c for c in cols_a if c in cols_b]
    by_policy = {}
    for key in sorted(a):
        pol = f"{key[2]} @ {key[3]}"
        st = by_policy.setdefault(pol, {"items": 0, "equal": 0, "first": ""})
        st["items"] += 1
        diff = [c for c in cols if a[key][c] != b[key][c]]
        if not diff:
            st["equal"] += 1
        elif not st["first"]:
            c = diff[0]
            va, vb = a[key][c], b[key][c]
            if c == "text":
                i = next((i for i, (x, y) in enumerate(zip(va, vb)) if x != y), min(len(va), len(vb)))
                va, vb = repr(va[max(0, i - 10):i + 20]), repr(vb[max(0, i - 10):i + 20])
            st["first"] = f"{key[4]} sample {key[5]}: {c} {args.label_a}={va} {args.label_b}={vb} (differs: {', '.join(diff)})"
    print(f"compared columns: {', '.join(cols)}")
    print(f"{'policy @ budget':<48} {'items':>5} {'equal':>5}  verdict")
    bad = 0
    for pol, st in by_policy.items():
        ok = st["equal"] == st["items"]
        bad += not ok
        print(f"{pol:<48} {st['items']:>5} {st['equal']:>5}  {'ok' if ok else 'FAIL  first difference: ' + st['first']}")
    if bad:
        print(f"grid: FAIL ({bad} of {len(by_policy)} policy cells differ)")
        return 1
    print(f"grid: PASS ({len(a)} generations in {len(by_policy)} policy cells identical: {', '.join(cols)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
