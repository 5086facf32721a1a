"""LongProc's countdown search trace, shared by tools/gen_task_goldens.py (prompts and references)
and tools/gen_longproc_scbench_goldens.py (grader goldens).

Re-written from the description of LongProc's build_countdown_demonstration
(princeton-pli/LongProc countdown_evaluator.py @78e873ae; docs/benchmarks.md, LongProc) and
checked against the traces stored in the data files (check_countdown_against_data: all 600 items
of countdown_{0.5k,2k,8k}.json).
"""
import json
import os


def _ind(level):
    return "" if level == 0 else " " * level + "|- "


def countdown_trace(nums, target):
    """LongProc's depth-first search for `target` from `nums` (a list of ints), verbalised.

    Returns (solution, body, reference): the three equations of the solution, the search log as the
    data files store it between <Search Procedure> tags, and the full reference output (log, trace
    back and <Solution> block). Raises ValueError when no solution exists.
    """
    log, states = [], []

    def pairs(ns):
        return [(ns[i], ns[j]) for i in range(len(ns)) for j in range(i + 1, len(ns))]

    def visit(ns, parent, eq, depth, init):
        sid = len(states)
        states.append((parent, eq))
        if not init:
            head = ns[0]
            if head == "DIV0":
                log.append("\n%sTry %s. drop this branch." % (_ind(depth), eq))
                return False
            if head % 1 != 0:
                log.append("\n%sTry %s. %s is a decimal, drop this branch." % (_ind(depth), eq, "%.1f" % head))
                return False
            if head >= 2000:
                log.append("\n%sTry %s. %s exceeds the maximum intermediate result, drop this branch." % (_ind(depth), eq, head))
                return False
        if len(ns) == 1:
            ok = ns[0] == target
            log.append("\n%sTry %s. Evaluate %s %s %s, %s" % (_ind(depth), eq, ns[0], "==" if ok else "!=", target,
                                                               "target found!" if ok else "drop this branch."))
            return ok
        if not init:
            log.append("\n%sTry %s. Add %s to the number set." % (_ind(depth), eq, ns[0]))
        if len(ns) == 2:
            log.append(" Current number set: %s, target: %s, just two numbers left." % (ns, target))
        else:
            if init:
                log.append("Initial number set: %s, target: %s. Options for choosing two numbers: %s." % (ns, target, pairs(ns)))
            else:
                log.append(" Current number set: %s, target: %s. Options for choosing two numbers: %s." % (ns, target, pairs(ns)))
            depth += 1
        for i in range(len(ns)):
            for j in range(i + 1, len(ns)):
                a, b = ns[i], ns[j]
                rest = [x for k, x in enumerate(ns) if k not in (i, j)]
                if len(ns) > 2:
                    log.append("\n%sPick two numbers (%s, %s) (numbers left: %s). Try possible operations." % (_ind(depth), a, b, rest))
                if a < b:
                    a, b = b, a
                tries = [(a + b, "%s + %s = %s" % (a, b, a + b)), (a - b, "%s - %s = %s" % (a, b, a - b)),
                         (a * b, "%s * %s = %s" % (a, b, a * b))]
                if b == 0:
                    tries.append(("DIV0", "%s / %s (invalid operation)" % (a, b)))
                elif a % b == 0:
                    tries.append((a // b, "%s / %s = %s" % (a, b, a // b)))
                else:
                    tries.append((a / b, "%s / %s = %s" % (a, b, "%.1f" % (a / b))))
                for val, e in tries:
                    if visit([val] + rest, sid, e, depth + 1, False):
                        return True
        return False

    if not visit(list(nums), -1, None, 0, True):
        raise ValueError("no solution")
    sol, s = [], len(states) - 1
    while states[s][0] != -1:
        sol.append(states[s][1])
        s = states[s][0]
    sol.reverse()
    body = "".join(log)
    tail = ("Now we have found the target, let's trace back the solution:\nFinal step: %s\nThe step before: %s\n"
            "The first step: %s\n\nOutput the solution in the required format:\n<Solution>\n%s\n%s\n%s\n</Solution>\n"
            % (sol[2], sol[1], sol[0], sol[0], sol[1], sol[2]))
    return sol, body, "# Search Procedure\n" + body + "\n\n" + tail


def check_countdown_against_data(shared):
    """The data files store each item's trace as '<Search Procedure>\\n{log}\\n</Search Procedure>'."""
    n = 0
    for ln in ("0.5k", "2k", "8k"):
        p = os.path.join(shared, "datasets/longproc/countdown/countdown_%s.json" % ln)
        for d in json.load(open(p)):
            _, body, _ = countdown_trace(d["nums"], d["target"])
            stored = d["demonstration"].split("<Search Procedure>\n", 1)[1].split("\n</Search Procedure>", 1)[0]
            assert stored == body, (p, d["nums"], d["target"])
            n += 1
    return n
