#!/usr/bin/env python3
"""Tables and plots for `make experiment` (models/experiment.sh).

usage: experiment_report.py RESULTS_DIR OUT_DIR

RESULTS_DIR holds, per task and model, TASK.MODEL.eval.json (`latent eval
--json --bucket-width 1` on the long test set) and TASK.MODEL.train.json
(what experiment.sh recorded of the training run), plus run.json (the
experiment's settings and machine). OUT_DIR receives the markdown tables
(between the markers <!-- results:begin --> and <!-- results:end --> of
OUT_DIR/experiments.md when that page has them, else as experiment-results.md)
and one SVG plot per task: accuracy against position (group tasks)
or alias depth (var-assign), a line per model, the trained length marked.
The SVG is written here, by hand, so that the experiment needs nothing
beyond python3.
"""
import json
import os
import sys

COLORS = {"plain": "#7f7f7f", "t2mlr": "#d62728", "t2mlr-adaptive": "#ff9896", "lrt": "#1f77b4"}
LABELS = {"plain": "plain transformer", "t2mlr": "T2MLR, Jacobi fixed D",
          "t2mlr-adaptive": "T2MLR, adaptive Jacobi", "lrt": "LRT"}


def load(path):
    with open(path) as f:
        return json.load(f)


def curve(ev):
    """(x, accuracy, n) per bucket of width 1."""
    return [(r["from"], r["accuracy"], r["n"]) for r in ev["rows"] if r["from"] == r["to"]]


def mean_acc(points, lo, hi):
    sel = [(a, n) for x, a, n in points if lo <= x <= hi]
    tot = sum(n for _, n in sel)
    return sum(a * n for a, n in sel) / tot if tot else float("nan")


def min_acc(points, lo, hi):
    sel = [a for x, a, n in points if lo <= x <= hi]
    return min(sel) if sel else float("nan")


def svg_plot(path, title, xlabel, series, trained, chance):
    """series: [(name, [(x, y), ...])]; trained: x of the trained length (a dashed line)."""
    W, H, L, R, T, B = 640, 380, 60, 200, 40, 50
    xs = [x for _, pts in series for x, _ in pts] or [0, 1]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1

    def px(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return T + (1 - y) * (H - T - B)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">%s</text>' % (L, esc(title))]
    for k in range(6):
        y = k / 5
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, py(y), py(y)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (L - 6, py(y) + 4, y))
    step = max(1, (x1 - x0) // 8)
    for x in range(x0, x1 + 1, step):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(x), H - B + 18, x))
    out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % ((L + W - R) / 2, H - 10, esc(xlabel)))
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (L, W - R, H - B, H - B))
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (L, L, T, H - B))
    if chance is not None:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="2,3"/>' % (L, W - R, py(chance), py(chance)))
        out.append('<text x="%d" y="%.1f" fill="#999">chance</text>' % (W - R + 4, py(chance) + 4))
    if trained is not None and x0 <= trained <= x1:
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black" stroke-dasharray="5,4"/>' % (px(trained), px(trained), T, H - B))
        out.append('<text x="%.1f" y="%d">trained length</text>' % (px(trained) + 4, T + 12))
    for i, (name, pts) in enumerate(series):
        c = COLORS.get(name, "#2ca02c")
        d = " ".join("%s%.1f,%.1f" % ("M" if j == 0 else "L", px(x), py(y)) for j, (x, y) in enumerate(pts))
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="2"/>' % (d, c))
        ly = T + 20 + 20 * i
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>' % (W - R + 10, W - R + 30, ly + 40, ly + 40, c))
        out.append('<text x="%d" y="%d">%s</text>' % (W - R + 36, ly + 44, esc(LABELS.get(name, name))))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fmt(x):
    return "—" if x != x else "%.3f" % x


def seeds_table(run, res):
    """Markdown lines: per replicated task, mean and worst position past the
    trained length for each seed (this run's and its replicates'), and how
    many seeds reach at least 0.99 at every position up to the test length."""
    reps = run.get("replicates") or []
    if not reps:
        return []
    lines = []
    seeds = [(run["seeds"], res)] + [(r["seed"], r["results"]) for r in reps]
    for task in run["tasks"]:
        if task["name"] not in run.get("replicate_tasks", []) or task["kind"] != "group":
            continue
        name, trained, xl = task["name"], task["trained"], task["test_len"]
        models = [m for m in run["models"] if m in run.get("replicate_models", [])]
        lines += ["### %s over %d seeds" % (task["title"], len(seeds)), "",
                  "The same recipe on each seed's own data, inits and training order (`make experiment SEED=N`); "
                  "mean / worst position over %d-%d, past the trained length." % (trained + 1, xl), "",
                  "| seed | %s |" % " | ".join(LABELS[m] for m in models), "|---|%s" % ("---|" * len(models))]
        reached = {m: 0 for m in models}
        for seed, path in seeds:
            cells = []
            for m in models:
                ev = os.path.join(path, "%s.%s.eval.json" % (name, m))
                if not os.path.exists(ev):
                    cells.append("—")
                    continue
                pts = curve(load(ev))
                worst = min_acc(pts, 1, xl)
                # the targets: a recurrent model at least 0.99 at every position,
                # the plain one at most 0.3 on average past the trained length
                reached[m] += (mean_acc(pts, trained + 1, xl) <= 0.3) if m == "plain" else (worst >= 0.99)
                cells.append("%s / %s" % (fmt(mean_acc(pts, trained + 1, xl)), fmt(min_acc(pts, trained + 1, xl))))
            lines.append("| %s%s | %s |" % (seed, " (the tables above)" if path == res else "", " | ".join(cells)))
        said = []
        for m in models:
            what = ("at most 0.3 on average past position %d" % trained if m == "plain"
                    else "at least 0.99 at every position 1-%d" % xl)
            said.append("%s %s in %d of %d seeds" % (LABELS[m], what, reached[m], len(seeds)))
        lines += ["", "; ".join(said) + ".", ""]
    return lines


def main():
    res, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    run = load(os.path.join(res, "run.json"))
    lines = ["<!-- written by models/tools/experiment_report.py from %s; do not edit by hand -->" % res,
             "Machine: %s; %d runs at a time, one thread each; %s products; seed %s; %s steps per model; "
             "weight decay %s%s." %
             (run["cpu"], run["jobs"], run["precision"], run["seeds"], run["steps"], run.get("weight_decay", "0.1"),
              " (QUICK=1: a smoke run, not evidence)" if run.get("quick") else ""), ""]
    for task in run["tasks"]:
        name, kind, trained = task["name"], task["kind"], task.get("trained")
        rows, series = [], []
        for model in run["models"]:
            ev_path = os.path.join(res, "%s.%s.eval.json" % (name, model))
            tr_path = os.path.join(res, "%s.%s.train.json" % (name, model))
            if not os.path.exists(ev_path):
                continue
            pts = curve(load(ev_path))
            tr = load(tr_path) if os.path.exists(tr_path) else {}
            series.append((model, [(x, a) for x, a, _ in pts]))
            hi = max(x for x, _, _ in pts)
            if kind == "group":
                rows.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    LABELS[model], fmt(mean_acc(pts, 1, trained)), fmt(min_acc(pts, 1, trained)),
                    fmt(mean_acc(pts, trained + 1, hi)), fmt(min_acc(pts, trained + 1, hi)),
                    tr.get("time", "—"), tr.get("iters", "—")))
            else:
                rows.append("| %s | %s | %s | %s |" % (
                    LABELS[model], " | ".join(fmt(mean_acc(pts, d, d)) for d in range(task["min_x"], task["max_x"] + 1)),
                    tr.get("time", "—"), tr.get("iters", "—")))
        if not rows:
            continue
        lines.append("### %s" % task["title"])
        lines.append("")
        if kind == "group":
            lines.append("Trained on %d elements, tested on %d (%d records); accuracy of the running product per position." %
                         (trained, task["test_len"], task["test_records"]))
            lines.append("")
            lines.append("| model | mean, 1-%d | worst position, 1-%d | mean, %d-%d | worst position, %d-%d | training time | Jacobi iterations |" %
                         (trained, trained, trained + 1, task["test_len"], trained + 1, task["test_len"]))
            lines.append("|---|---|---|---|---|---|---|")
        else:
            depths = range(task["min_x"], task["max_x"] + 1)
            lines.append("Alias depth %d-%d, trained on depths %d-%d (%d test records); accuracy of the queried digit per depth." %
                         (task["min_x"], task["max_x"], task["train_min"], task["train_max"], task["test_records"]))
            lines.append("")
            lines.append("| model | %s | training time | Jacobi iterations |" % " | ".join("depth %d" % d for d in depths))
            lines.append("|---|%s---|---|" % ("---|" * len(depths)))
        lines += rows
        svg = "experiment-%s.svg" % name
        svg_plot(os.path.join(out, svg), task["title"], "position" if kind == "group" else "alias depth", series,
                 trained if kind == "group" else task["train_max"], task.get("chance"))
        lines += ["", "![%s](%s)" % (task["title"], svg), ""]
    lines += seeds_table(run, res)
    # docs/experiments.md carries the tables between its markers; elsewhere
    # (a QUICK run's report directory) they get a page of their own
    page = os.path.join(out, "experiments.md")
    b, e = "<!-- results:begin -->", "<!-- results:end -->"
    text = open(page).read() if os.path.exists(page) else ""
    if b in text and e in text:
        head, rest = text.split(b, 1)
        tail = rest.split(e, 1)[1]
        with open(page + ".tmp", "w") as f:
            f.write(head + b + "\n" + "\n".join(lines) + "\n" + e + tail)
        os.replace(page + ".tmp", page)
    else:
        with open(os.path.join(out, "experiment-results.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
