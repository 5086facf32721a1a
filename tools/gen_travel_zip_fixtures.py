#!/usr/bin/env python3
"""Fixtures and goldens for two data layouts kvbench reads that have no offline copy:

1. LongProc travel_planning in its GitHub layout (princeton-pli/LongProc @78e873a,
   data/travel_planning/): travel_planning_all.json (one JSON array for both configs, split by
   `estimated_output_tokens`: 2k = [0, 2048), 8k = [4096, 8192)), travel_planning_icl_examples.json
   and prompts.yaml (docs/benchmarks.md, LongProc). The fixture rows below are
   written from the schema of the real ICL examples file (same keys); prompts.yaml and the ICL
   examples are copied from the offline mirror. Goldens: every prompt and reference output as
   longproc_data.py builds them: yaml.safe_load, two str.format passes
   (demonstration + "{problem}", then problem=disambig_question_text), the demonstrations
   "# Example\\n{problem}\\n\\n{solution}" joined by "\\n\\n", and the DFS trace of
   build_travel_plan_demonstration, re-written below from its behaviour (LongProc is not on PyPI).
   The re-written search is checked against the real ICL examples' ground_truth_plan, as the
   reference itself asserts.
2. LongBench v1's data.zip (HF THUDM/LongBench, §9a: members data/<task>.jsonl): a tiny archive
   written with Python's zipfile (deflate, fixed timestamps, so the bytes are reproducible) from
   the LongBench fixture JSONL files, at tests/fixtures/longbench_zip/longbench/data.zip.

Run from the repository root (needs the test data unpacked: configure the build first). If PyYAML is missing, the script creates
`.venv-goldens` with pip and re-runs itself there:
    python3 tools/gen_travel_zip_fixtures.py
"""
import hashlib
import json
import os
import sys
import zipfile

import goldens_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "datasets")
ZIPFIX = os.path.join(ROOT, "tests", "fixtures", "longbench_zip")
GOLD = os.path.join(ROOT, "tests", "fixtures", "tasks", "travel_planning.json")

goldens_env.ensure(["yaml"], ["-q", "pyyaml"])
import yaml  # noqa: E402


# ---- the travel-planning search (behaviour of LongProc build_travel_plan_demonstration) -------
START = "the starting point"


def _pad(level):
    return "" if level == 0 else " " * level + "|- "


def _names(stays):
    return "[" + ", ".join(s["city"] for s in stays) + "]"


def travel_procedure(ex):
    """Returns (procedure text, plan text) for one record."""
    cons = ex["constraints"]
    flights = {tuple(c) for c in ex["connected_cities"]}
    fixed = [c for c in cons if c["type"] == "fixed"]
    fixed_names = {c["city"] for c in fixed}
    free = [c for c in cons if c["type"] == "duration" and c["city"] not in fixed_names]
    out = ["Read the requirements and identify the cities that have fixed schedules and the cities that need to be arranged."]
    for i, c in enumerate(cons):
        if c["type"] == "fixed":
            continue
        if c["city"] in fixed_names:
            nxt = cons[i + 1]
            assert nxt["type"] == "fixed" and nxt["city"] == c["city"]
            out.append("* City: %s, Duration: %d days, Fixed Schedule: Day %d - %d." % (c["city"], c["num_days"], nxt["start_day"], nxt["end_day"]))
        else:
            out.append("* City: %s, Duration: %d days." % (c["city"], c["num_days"]))
    out.append("")
    fixed = sorted(fixed, key=lambda c: c["start_day"])
    if fixed:
        out.append("Cities that have fixed schedules (sorted by their arrival days):")
        out += ["* City: %s, Fixed Schedule: Day %d - %d." % (c["city"], c["start_day"], c["end_day"]) for c in fixed]
    else:
        out.append("Cities that have fixed schedules: None.")
    out.append("")
    if free:
        out.append("Cities needing arrangement:")
        out += ["* City: %s, Duration: %d days." % (c["city"], c["num_days"]) for c in free]
    else:
        out.append("Cities needing arrangement: None.")
    out.append("")

    def search(day, plan, left):
        lv = 2 * len(plan)
        out.append(_pad(lv) + "Current day: %d. Current plan: %s." % (day, _names(plan)))
        if len(plan) == ex["num_cities"]:
            out.append(_pad(lv) + "All %d cities are arranged. Complete plan is found!" % ex["num_cities"])
            return plan
        out.append(_pad(lv) + "Check whether the city with an arrival day of Day %d - is fixed." % day)
        hit = [c for c in fixed if c["start_day"] == day]
        if hit:
            f = hit[0]
            out.append(_pad(lv) + "Yes. The city with an arrival day of Day %d - is fixed: %s." % (day, f["city"]))
            opts = [{"city": f["city"], "num_days": f["end_day"] - f["start_day"] + 1, "start_day": f["start_day"], "end_day": f["end_day"]}]
        else:
            out.append(_pad(lv) + "No. Consider possible options from cities needing arrangement: %s and explore these options in order." % _names(left))
            opts = [{"city": c["city"], "num_days": c["num_days"], "start_day": day, "end_day": day + c["num_days"] - 1} for c in left]
        prev = plan[-1]["city"] if plan else START
        later = [c for c in fixed if c["start_day"] > day]
        nxt = later[0] if later else None
        lv += 1
        for o in opts:
            out.append(_pad(lv) + "Try arranging to visit %s from Day %d. Duration: %d days. Schedule: Day %d - %d." % (o["city"], day, o["num_days"], day, day + o["num_days"] - 1))
            out.append(_pad(lv) + "Check for direct flight from %s to %s." % (prev, o["city"]))
            if prev != START and (prev, o["city"]) not in flights:
                out.append(_pad(lv) + "No. Drop this branch.")
                continue
            out.append(_pad(lv) + "Yes.")
            if nxt is None:
                out.append(_pad(lv) + "Check whether this arrangement is compatible with the next fixed schedule after Day %d: None." % day)
                out.append(_pad(lv) + "No following fixed schedules. This arrangement is compatible.")
            else:
                out.append(_pad(lv) + "Check whether this arrangement is compatible with the next fixed schedule after Day %d: %s (Day %d - %d)." % (day, nxt["city"], nxt["start_day"], nxt["end_day"]))
                a, b = o["end_day"], nxt["start_day"]
                if b < a:
                    out.append(_pad(lv) + "The departure day of %s is Day %d. The arrival day of %s is Day %d. Day %d is later than (>) Day %d. This arrangement is incompatible. Drop this branch." % (o["city"], a, nxt["city"], b, a, b))
                    continue
                out.append(_pad(lv) + "The departure day of %s is Day %d. The arrival day of %s is Day %d. Day %d is not later than (<=) Day %d. This arrangement is compatible." % (o["city"], a, nxt["city"], b, a, b))
            out.append(_pad(lv) + "This arrangement is feasible for now. Continue to arrange the rest of the plan.")
            r = search(o["end_day"], plan + [o], [c for c in left if c["city"] != o["city"]])
            if r is not None:
                return r
        out.append(_pad(lv) + "Fail to arrange any option on day %d in the current arrangement. Drop this branch." % day)
        return None

    plan = search(1, [], free)
    lines = []
    for i, s in enumerate(plan):
        if i == 0:
            lines.append("**Day %d-%d:** Arriving in %s and visit %s for %d days." % (s["start_day"], s["end_day"], s["city"], s["city"], s["num_days"]))
        else:
            lines.append("**Day %d-%d:** Visit %s for %d days." % (s["start_day"], s["end_day"], s["city"], s["num_days"]))
        if i + 1 < len(plan):
            lines.append("**Day %d:** Fly from %s to %s." % (s["end_day"], s["city"], plan[i + 1]["city"]))
    plan_text = "\n".join(lines)
    proc = ("<Solving Procedure>\n" + "\n".join(out) + "\n</Solving Procedure>\n\nOutput the plan in the required format:\n<Plan>\n"
            + plan_text + "\n</Plan>")
    return proc, plan_text, plan


# ---- fixture problems (schema of travel_planning_icl_examples.json + estimated_output_tokens) --
def problem(pid, eot, days, stays, fixed, flights):
    """stays: [(city, days)] in constraint order; fixed: {city: (start, end)}; flights: one-way (from, to)."""
    cons = []
    for city, n in stays:
        cons.append({"type": "duration", "city": city, "num_days": n})
        if city in fixed:
            cons.append({"type": "fixed", "city": city, "start_day": fixed[city][0], "end_day": fixed[city][1]})
    wants = []
    for city, n in stays:
        wants.append("You would like to visit %s for %d days." % (city, n))
        if city in fixed:
            wants.append("You want to meet a friend in %s between day %d and day %d." % (city, fixed[city][0], fixed[city][1]))
    head = "You plan to visit %d European cities for %d days in total. You only take direct flights to commute between cities. %s" % (
        len(stays), days, " ".join(wants))
    tail = "\n\nFind a trip plan of visiting the cities for %d days by taking direct flights to commute between them." % days
    ex = {"num_cities": len(stays), "total_days": days, "constraints": cons, "connected_cities": [list(f) for f in flights],
          "original_question_text": head + "\n\nHere are the cities that have direct flights:\n" +
          ", ".join("%s and %s" % f for f in flights) + "." + tail,
          "disambig_question_text": head + "\n\nHere are the cities that have direct flights:\n" +
          ", ".join("from %s to %s" % f for f in flights) + "." + tail,
          "id": pid, "estimated_output_tokens": eot}
    _, plan_text, plan = travel_procedure(dict(ex, ground_truth_plan="x\n\ny"))
    ex["ground_truth_cities"] = "**".join(s["city"] for s in plan)
    ex["ground_truth_durations"] = "**".join(str(s["num_days"]) for s in plan)
    ex["ground_truth_plan"] = "Here is the trip plan for visiting the %d European cities for %d days:\n\n%s" % (len(stays), days, plan_text)
    return ex


def travel_rows():
    return [
        # 2k #0: Oslo first reaches Paris but Paris has no flight to the fixed Rome (Day 8-10):
        # backtracking over two levels, then Paris -> Oslo -> Rome.
        problem("trip_planning_example_9001", 1200, 10, [("Oslo", 4), ("Rome", 3), ("Paris", 5)],
                {"Rome": (8, 10)}, [("Oslo", "Paris"), ("Paris", "Oslo"), ("Oslo", "Rome")]),
        problem("trip_planning_example_9002", 2048, 7, [("Lyon", 4), ("Nice", 4)], {},
                [("Lyon", "Nice")]),  # at the 2k upper bound: in no config
        # 8k #0: no fixed schedule; non-ASCII city name.
        problem("trip_planning_example_9003", 4096, 9, [("Zürich", 3), ("Prague", 4), ("Berlin", 4)], {},
                [("Berlin", "Zürich"), ("Zürich", "Prague"), ("Prague", "Zürich")]),
        # 2k #1: two fixed schedules given out of day order; Lisbon (6 days) is incompatible with Seville.
        problem("trip_planning_example_9004", 600, 14, [("Seville", 5), ("Lisbon", 6), ("Porto", 4), ("Madrid", 2)],
                {"Seville": (10, 14), "Madrid": (1, 2)}, [("Madrid", "Lisbon"), ("Madrid", "Porto"), ("Porto", "Lisbon"),
                                                          ("Lisbon", "Seville"), ("Porto", "Seville")]),
        problem("trip_planning_example_9005", 9000, 5, [("Riga", 3), ("Tallinn", 3)], {},
                [("Riga", "Tallinn")]),  # above 8k: in no config
        # 8k #1: fractional estimate inside [4096, 8192); Milan then Venice (Day 2-5) is incompatible
        # with the fixed Split (Day 4-6).
        problem("trip_planning_example_9006", 8191.5, 7, [("Milan", 2), ("Venice", 4), ("Split", 3)], {"Split": (4, 6)},
                [("Milan", "Venice"), ("Venice", "Split"), ("Split", "Milan")]),
    ]


def _w(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def main():
    shared = os.path.join(os.environ.get("KVB_TEST_DATA_DIR", os.path.join(ROOT, "build", "test-data")), "datasets",
                          "longproc", "travel_planning")
    icl_text = open(os.path.join(shared, "travel_planning_icl_examples.json"), encoding="utf-8").read()
    yaml_text = open(os.path.join(shared, "prompts.yaml"), encoding="utf-8").read()
    icl = json.loads(icl_text)
    for d in icl:  # the reference's own assertion, on real data
        assert travel_procedure(d)[1] == d["ground_truth_plan"].split("\n\n")[1].strip(), d["id"]
    print("travel search reproduces the ground_truth_plan of %d real ICL examples" % len(icl), file=sys.stderr)
    rows = travel_rows()
    tdir = os.path.join(FIX, "longproc", "travel_planning")
    _w(os.path.join(tdir, "travel_planning_all.json"), json.dumps(rows, ensure_ascii=False, indent=1))
    _w(os.path.join(tdir, "travel_planning_icl_examples.json"), icl_text)
    _w(os.path.join(tdir, "prompts.yaml"), yaml_text)

    user_prompt = yaml.safe_load(yaml_text)["USER_PROMPT"]
    demo = "\n\n".join("# Example\n{problem}\n\n{solution}".format(problem=d["disambig_question_text"], solution=travel_procedure(d)[0])
                       for d in icl)
    tmpl = user_prompt.format(demonstration=demo, problem="{problem}")
    gold = {"demonstration": demo}
    for ln, (lo, hi) in (("2k", (0, 2048)), ("8k", (4096, 8192))):
        sel = [d for d in rows if lo <= d["estimated_output_tokens"] < hi]
        exs = []
        for d in sel:
            item = {"id": d["id"], "problem": d["disambig_question_text"], "ground_truth_plan": d["ground_truth_plan"],
                    "ground_truth_cities": d["ground_truth_cities"], "ground_truth_durations": d["ground_truth_durations"],
                    "reference_output": travel_procedure(d)[0]}
            p = tmpl.format(**item)
            exs.append({"id": d["id"], "prompt_sha256": hashlib.sha256(p.encode("utf-8")).hexdigest(),
                        "prompt_len": len(p.encode("utf-8")), "prompt_tail": p[-700:], "reference": item["reference_output"],
                        "ground_truth_cities": d["ground_truth_cities"], "ground_truth_durations": d["ground_truth_durations"]})
        gold["travel_planning_" + ln] = {"count": len(sel), "first_prompt": tmpl.format(problem=sel[0]["disambig_question_text"]),
                                         "examples": exs}
    _w(GOLD, json.dumps(gold, ensure_ascii=False, indent=1) + "\n")

    # LongBench data.zip: the fixture JSONL files as members data/<name>.jsonl, plus a directory entry.
    src = os.path.join(FIX, "longbench", "data")
    path = os.path.join(ZIPFIX, "longbench", "data.zip")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("data/", date_time=(2023, 8, 1, 0, 0, 0)), b"")
        for name in sorted(os.listdir(src)):
            info = zipfile.ZipInfo("data/" + name, date_time=(2023, 8, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, open(os.path.join(src, name), "rb").read())
    print("wrote %s, %s, %s" % (os.path.relpath(tdir, ROOT), os.path.relpath(GOLD, ROOT), os.path.relpath(path, ROOT)), file=sys.stderr)


if __name__ == "__main__":
    main()
