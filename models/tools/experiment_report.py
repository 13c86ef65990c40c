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
SHORT = {"plain": "plain", "t2mlr": "T2MLR", "t2mlr-adaptive": "T2MLR adaptive", "lrt": "LRT"}


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


def svg_frame(title, W, H, L, R, py):
    """An SVG plot's opening: the canvas, its title and the accuracy grid 0..1."""
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">%s</text>' % (L, esc(title))]
    for k in range(6):
        y = k / 5
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, py(y), py(y)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (L - 6, py(y) + 4, y))
    return out


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
    out = svg_frame(title, W, H, L, R, py)
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


# ---- `make experiment-state` (experiment.sh STATE=1): curricula for S5 and variable assignment ----
STATE_TITLES = {"s5": "S5 word problem, length curriculum 4 -> 8 -> 16",
                "var": "Variable assignment, depth curriculum 1 -> 5",
                "var-lookup": "Variable assignment, lookup stages (depth 0; 2, then 8 digit variables) shared by the models, "
                              "then depth curriculum 1 -> 5"}
SEED_DASH = ["", "6,3", "2,3", "8,2,2,2"]


def var_training_data(res, seed):
    """What the final depth stage trained on, from its data file's JSON
    (WORK/var-sSEED/train5.json beside WORK/results): queries a record, and
    the share of task queries of any variable and of records with decoys.
    With the gamma gate (STATE_VAR_DECOY_GAMMA) the decoys are in train5d.json,
    taken once T2MLR's gamma_rec reached the gate."""
    base = os.path.join(res, "..", "var-%s" % seed)
    try:
        meta = json.load(open(os.path.join(base, "train5.json")))
    except (OSError, ValueError):
        return ""
    gated = ""
    if os.path.exists(os.path.join(base, "train5d.json")):
        try:
            meta["decoy_pct"] = json.load(open(os.path.join(base, "train5d.json"))).get("decoy_pct", 0)
            gated = ", from the chunk after gamma_rec reached the gate"
        except (OSError, ValueError):
            pass
    q = meta.get("n_queries", 1)
    text = "; %d quer%s a training record" % (q, "y" if q == 1 else "ies")
    if meta.get("query_any_pct"):
        text += ", %d%% of them of any variable" % meta["query_any_pct"]
    if meta.get("decoy_pct"):
        text += "; decoy chains in %d%% of stage 5's training records%s" % (meta["decoy_pct"], gated)
    return text


def state_metric(task, acc):
    """The curve's y: S5 the mean and the worst over positions 1-16 of the
    length-16 test; var-assign the accuracy at depth 5 (and the mean over 1-5)."""
    if task == "s5":
        v = [acc[k] for k in acc if 1 <= int(k) <= 16]
        return (sum(v) / len(v), min(v)) if v else (float("nan"), float("nan"))
    v = [acc[k] for k in acc if 1 <= int(k) <= 5]
    return acc.get("5", float("nan")), (sum(v) / len(v) if v else float("nan"))


def svg_curves(path, title, xlabel, series, chance, xscale=1.0):
    """series: [(model, seed_index, label, [(x, y), ...])]; x is divided by xscale for the labels."""
    W, H, L, R, T, B = 680, 380, 60, 210, 40, 50
    xs = [x for *_, pts in series for x, _ in pts] or [0, 1]
    x0, x1 = 0.0, max(xs) or 1.0

    def px(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return T + (1 - y) * (H - T - B)
    out = svg_frame(title, W, H, L, R, py)
    for k in range(6):
        x = x0 + (x1 - x0) * k / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.3g</text>' % (px(x), H - B + 18, x / xscale))
    out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % ((L + W - R) / 2, H - 10, esc(xlabel)))
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (L, W - R, H - B, H - B))
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (L, L, T, H - B))
    if chance is not None:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="2,3"/>' % (L, W - R, py(chance), py(chance)))
    for i, (model, si, label, pts) in enumerate(series):
        c = COLORS.get(model, "#2ca02c")
        d = " ".join("%s%.1f,%.1f" % ("M" if j == 0 else "L", px(x), py(y)) for j, (x, y) in enumerate(pts))
        dash = SEED_DASH[si % len(SEED_DASH)]
        da = ' stroke-dasharray="%s"' % dash if dash else ""
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>' % (d, c, da))
        ly = T + 10 + 18 * i
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"%s/>' % (W - R + 10, W - R + 30, ly, ly, c, da))
        out.append('<text x="%d" y="%d">%s</text>' % (W - R + 36, ly + 4, esc(label)))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def per_product(acc):
    """S5: the per-product accuracy a that best fits acc_k = a^(k-1) over
    positions 2-16 of the length-16 test (least squares on the logs)."""
    import math
    num = den = 0.0
    for k in range(2, 17):
        v = acc.get(str(k))
        if v is None:
            continue
        num += (k - 1) * math.log(max(v, 1e-4))
        den += (k - 1) ** 2
    return math.exp(num / den) if den else float("nan")


def power_law_goal(pts, goal):
    """Least squares on the logs of err = c * tokens^b over pts, a list of
    (tokens, error); the tokens at which err reaches goal. Returns a dict, with
    "tokens" None when the error does not fall, or None with fewer than 3
    points."""
    import math
    if len(pts) < 3:
        return None
    xs = [math.log(t) for t, _ in pts]
    ys = [math.log(max(e, 1e-6)) for _, e in pts]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if b >= 0:
        return {"points": n, "slope": b, "tokens": None}
    return {"points": n, "slope": b, "tokens": math.exp((math.log(goal) - (my - b * mx)) / b)}


def projected_cost(cv, fit):
    """Adds to a power_law_goal fit the CPU cost of reaching its tokens: the
    run's CPU seconds so far plus the rest at its final stage's measured CPU
    seconds per token (from that stage's own chunks)."""
    last = cv[-1]
    prev = [c for c in cv if c["stage"] != last["stage"]]
    t0, s0 = (prev[-1]["tokens"], prev[-1]["cpu_s"]) if prev else (0, 0.0)
    rate = (last["cpu_s"] - s0) / max(1, last["tokens"] - t0)
    extra = max(0.0, fit["tokens"] - last["tokens"]) * rate
    fit.update(rate=rate, cpu_h=(last["cpu_s"] + extra) / 3600.0)
    return fit


def s5_projection(cv, after_first_stage=True):
    """Fit of the per-product error 1 - a against training tokens over the
    evaluations since a passed 0.5 (a power law, least squares on the logs),
    and the tokens at which a reaches 0.95^(1/15) (0.99659: every position
    1-16 at least 0.95 if the products' errors were independent). Returns a
    dict or None when there are fewer than 3 points or no downward trend."""
    pts = [(c["tokens"], per_product(c["final_acc"]), c) for c in cv]
    # only after the transition: position 2 (one product) right at least half the time
    pts = [(t, a, c) for t, a, c in pts if a == a and a > 0.5 and c["final_acc"].get("2", 0) > 0.5]
    if after_first_stage:  # the conservative fit: past the transition of the first stage
        pts = [(t, a, c) for t, a, c in pts if c["stage"] != cv[0]["stage"]]
    fit = power_law_goal([(t, 1 - a) for t, a, _ in pts], 1 - 0.95 ** (1 / 15))
    if fit is None or fit["tokens"] is None:
        return fit
    fit["a_last"] = pts[-1][1]
    return projected_cost(cv, fit)


def var_projection(cv):
    """var-assign: fit of the depth-5 error against training tokens over the
    evaluations of the last depth stage (5: every depth in the training
    data), a power law as for S5, and the tokens at which depth 5 reaches 0.9.
    None when the run did not reach that stage or has fewer than 3 of its
    evaluations. A plateau that breaks (the lookup's did, seed 11's depth
    stages did) is not a power law: the fit describes a creep, not a jump."""
    pts = [(c["tokens"], 1 - c["final_acc"]["5"]) for c in cv if str(c["stage"]) == "5" and "5" in c["final_acc"]]
    fit = power_law_goal(pts, 0.1)
    if fit is None or fit["tokens"] is None:
        return fit
    fit["a_last"] = 1 - pts[-1][1]
    return projected_cost(cv, fit)


def var_target_met(a5, plain5):
    """Issue 24's var target for one seed: depth 5 at least 0.9 and at least 0.3 above plain."""
    return a5 >= 0.9 and a5 - plain5 >= 0.3


def heldout_depth5(path):
    """Depth-5 accuracy and its record count on the held-out set
    (models/experiment.sh, state_heldout); (nan, 0) where there is none."""
    if not os.path.exists(path):
        return float("nan"), 0
    for r in json.load(open(path))["rows"]:
        if r.get("kind") == "answer" and r["from"] == 5 and r["to"] == 5:
            return r["accuracy"], r["n"]
    return float("nan"), 0


def state_main(res, out, cpu, jobs, prec, budget, quick, np="1"):
    os.makedirs(out, exist_ok=True)
    if "amx" not in cpu and cpu.endswith(")"):
        cpu = cpu[:-1] + "; no AMX)"
    runs, titles = {}, dict(STATE_TITLES)
    for fn in sorted(os.listdir(res)):
        if fn.endswith(".curve.jsonl"):
            task, model, seed = fn[: -len(".curve.jsonl")].split(".")
            if model == "lookup":  # var's shared lookup stages: the first lines of every model's curve
                titles["var"] = STATE_TITLES["var-lookup"] + var_training_data(res, seed)
                continue
            runs.setdefault(task, []).append((model, int(seed[1:])))
    lines = ["<!-- written by models/tools/experiment_report.py --state from %s; do not edit by hand -->" % res,
             "Machine: %s; %s run(s) at a time, %s (other developers' jobs shared the machine); %s products; "
             "budget %s CPU seconds of `latent train` per model%s." %
             (cpu, jobs, "one thread each" if np == "1" else
              "each data parallel under `mpirun -np %s`, ranks of one thread (CPU seconds summed over them)" % np,
              prec, budget, " (QUICK=1: a smoke run, not evidence)" if quick == "1" else ""), ""]
    for task in ("s5", "var"):
        if task not in runs:
            continue
        order = {"plain": 0, "t2mlr": 1, "lrt": 2}
        rr = sorted(runs[task], key=lambda ms: (order.get(ms[0], 9), ms[1]))
        seeds = sorted({s for _, s in rr})
        lines += ["### %s" % titles[task], ""]
        if task == "s5":
            lines += ["| model | seed | steps | final stage | training tokens | training time | mean, 1-16 | worst position, 1-16 | mean, 17-32 | worst position, 17-32 |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
        else:
            lines += ["| model | seed | steps | final stage (max depth) | training tokens | training time | depth 1 | depth 2 | depth 3 | depth 4 | depth 5 | depth 5, held out |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        reached, total, finals, held = {}, {}, {}, {}
        tok_series, sec_series, cpu_series = [], [], []
        for model, seed in rr:
            base = os.path.join(res, "%s.%s.s%d" % (task, model, seed))
            cv = [json.loads(l) for l in open(base + ".curve.jsonl") if l.strip()]
            if not cv:
                continue
            last = cv[-1]
            y = [(c["tokens"], state_metric(task, c["final_acc"])[0]) for c in cv]
            ys = [(c["train_s"], state_metric(task, c["final_acc"])[0]) for c in cv]
            ycpu = [(c["cpu_s"], state_metric(task, c["final_acc"])[0]) for c in cv]
            lab = "%s, seed %d" % (SHORT[model], seed)
            tok_series.append((model, seeds.index(seed), lab, y))
            sec_series.append((model, seeds.index(seed), lab, ys))
            cpu_series.append((model, seeds.index(seed), lab, ycpu))
            done = os.path.exists(base + ".eval.json")
            if done:
                pts = curve(load(base + ".eval.json"))
            else:
                pts = [(int(k), a, 1) for k, a in last["final_acc"].items()]
            t = "%d:%02d CPU, %d:%02d wall" % (last["cpu_s"] // 60, last["cpu_s"] % 60, last["train_s"] // 60, last["train_s"] % 60)
            cell = lambda s: s if done else s + " (running)"
            if task == "s5":
                p32 = curve(load(base + ".eval32.json")) if os.path.exists(base + ".eval32.json") else []
                m16, w16 = mean_acc(pts, 1, 16), min_acc(pts, 1, 16)
                lines.append("| %s | %d | %d | length %d | %.2fM | %s | %s | %s | %s | %s |" % (
                    LABELS[model], seed, last["step"], last["stage"], last["tokens"] / 1e6, t, cell(fmt(m16)), fmt(w16),
                    fmt(mean_acc(p32, 17, 32)), fmt(min_acc(p32, 17, 32))))
                ok = (w16 >= 0.95) if model != "plain" else (m16 <= 0.3)
            else:
                accs = [mean_acc(pts, d, d) for d in range(1, 6)]
                h5, hn = heldout_depth5(base + ".heldout.json")
                lines.append("| %s | %d | %d | depth %s | %.2fM | %s | %s | %s |" % (
                    LABELS[model], seed, last["step"], last["stage"], last["tokens"] / 1e6, t,
                    " | ".join(fmt(a) for a in accs[:4]) + " | " + cell(fmt(accs[4])),
                    "%s (%d records)" % (fmt(h5), hn) if hn else "-"))
                finals[(model, seed)] = accs[4]
                if hn:
                    held[(model, seed)] = h5
                ok = None
            if done and ok is not None:
                reached[model] = reached.get(model, 0) + ok
                total[model] = total.get(model, 0) + 1
        held_reached, held_total = {}, {}
        if task == "var":
            for (model, seed), a5 in finals.items():
                if model != "plain" and os.path.exists(os.path.join(res, "var.%s.s%d.eval.json" % (model, seed))):
                    p = finals.get(("plain", seed), float("nan"))
                    reached[model] = reached.get(model, 0) + var_target_met(a5, p)
                    total[model] = total.get(model, 0) + 1
                if model != "plain" and (model, seed) in held and ("plain", seed) in held:
                    h, p = held[(model, seed)], held[("plain", seed)]
                    held_reached[model] = held_reached.get(model, 0) + var_target_met(h, p)
                    held_total[model] = held_total.get(model, 0) + 1
        lines.append("")
        if task == "s5":
            said = ["%s: %s in %d of %d finished seeds" % (LABELS[m], "mean over positions 1-16 at most 0.3" if m == "plain"
                    else "at least 0.95 at every position 1-16", reached[m], total[m]) for m in sorted(total, key=lambda m: order.get(m, 9))]
        else:
            said = ["%s: depth 5 at least 0.9 and at least 0.3 above plain (same seed) in %d of %d finished seeds%s" %
                    (LABELS[m], reached[m], total[m], " (on the held-out set: %d of %d)" % (held_reached[m], held_total[m])
                     if m in held_total else "") for m in total]
        if said:
            lines += ["Targets (issue 24): " + "; ".join(said) + ".", ""]
        if task == "s5":
            for model, seed in rr:
                if model == "plain":
                    continue
                cv = [json.loads(l) for l in open(os.path.join(res, "%s.%s.s%d.curve.jsonl" % (task, model, seed))) if l.strip()]
                pr = s5_projection(cv)
                pr_all = s5_projection(cv, False)
                if pr is None:
                    lines += ["Projection, %s seed %d: fewer than 3 evaluations with position 2 above 0.5; no fit." % (LABELS[model], seed), ""]
                elif pr["tokens"] is None:
                    lines += ["Projection, %s seed %d: the per-product error does not fall over the last %d evaluations; no fit." % (LABELS[model], seed, pr["points"]), ""]
                else:
                    lines += ["Projection, %s seed %d: per-product accuracy a (fit of acc_k = a^(k-1) over positions 2-16 of the length-16 test) "
                              "%.4f at the end; a power law fit of 1 - a against training tokens over the %d evaluations after the first stage "
                              "(exponent %.2f) reaches a = 0.99659 (0.95 at position 16 if errors were independent) at %.1fM tokens; "
                              "at this run's final-stage cost of %.1f CPU microseconds per token that is %.2f core-hours in all "
                              "(%.1f times the budget)." % (LABELS[model], seed, pr["a_last"], pr["points"], pr["slope"], pr["tokens"] / 1e6,
                                                           pr["rate"] * 1e6, pr["cpu_h"], pr["cpu_h"] * 3600 / float(budget))
                              + ("" if not pr_all or not pr_all.get("tokens") else
                                 " Fitted instead over all %d evaluations since position 2 passed 0.5, the transition included "
                                 "(exponent %.2f): %.1fM tokens, %.2f core-hours." % (pr_all["points"], pr_all["slope"],
                                                                                          pr_all["tokens"] / 1e6, pr_all["cpu_h"])), ""]
        if task == "var":
            for model, seed in rr:
                if model == "plain":
                    continue
                if finals.get((model, seed), 0) >= 0.9:
                    continue  # reached: nothing to project
                cv = [json.loads(l) for l in open(os.path.join(res, "var.%s.s%d.curve.jsonl" % (model, seed))) if l.strip()]
                pr = var_projection(cv)
                if pr is None:
                    lines += ["Projection, %s seed %d: fewer than 3 evaluations in depth stage 5; no fit." % (LABELS[model], seed), ""]
                elif pr["tokens"] is None:
                    lines += ["Projection, %s seed %d: the depth-5 error does not fall over the %d evaluations of depth stage 5; no fit." %
                              (LABELS[model], seed, pr["points"]), ""]
                elif pr["cpu_h"] * 3600 / float(budget) > 1000:
                    # a shallow fit projects figures of no practical meaning; say what they mean instead
                    lines += ["Projection, %s seed %d: depth 5 at %.3f at the end; the power law fit of its error over the %d evaluations "
                              "of depth stage 5 (exponent %.2f) puts 0.9 more than a thousand times the budget away (%.3g core-hours): "
                              "out of reach by this recipe's creep; a plateau that breaks would need far less." %
                              (LABELS[model], seed, pr["a_last"], pr["points"], pr["slope"], pr["cpu_h"]), ""]
                else:
                    lines += ["Projection, %s seed %d: depth 5 at %.3f at the end; a power law fit of its error against training tokens over "
                              "the %d evaluations of depth stage 5 (exponent %.2f) reaches 0.9 at %.0fM tokens; at this stage's cost of "
                              "%.1f CPU microseconds per token that is %.1f core-hours in all (%.1f times the budget). A creep, extrapolated; "
                              "a plateau that breaks would need far less." %
                              (LABELS[model], seed, pr["a_last"], pr["points"], pr["slope"], pr["tokens"] / 1e6, pr["rate"] * 1e6,
                               pr["cpu_h"], pr["cpu_h"] * 3600 / float(budget)), ""]
        metric = "mean accuracy over positions 1-16" if task == "s5" else "accuracy at depth 5"
        chance = 1 / 120 if task == "s5" else 0.1
        for suffix, xl, ser, sc in (("tokens", "training tokens (millions)", tok_series, 1e6),
                                   ("seconds", "wall-clock seconds of training, one thread (%s)" % cpu.split(" (")[0], sec_series, 1.0),
                                   ("cpu", "CPU seconds of training, one thread (%s)" % cpu.split(" (")[0], cpu_series, 1.0)):
            svg = "experiment-state-%s-%s.svg" % (task, suffix)
            svg_curves(os.path.join(out, svg), "%s: %s; %s" % (task, metric, cpu), xl, ser, chance, sc)
            lines += ["![%s against %s](%s)" % (metric, suffix, svg), ""]
        # the raw curve: every evaluation
        lines += ["<details><summary>Every evaluation (%s)</summary>" % titles[task], "",
                  "| model | seed | step | stage | tokens | training CPU s | training wall s | wall s with evals | loss | %s | %s |" %
                  (("mean, 1-16", "worst, 1-16") if task == "s5" else ("depth 5", "mean, depths 1-5")),
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for model, seed in rr:
            for c in (json.loads(l) for l in open(os.path.join(res, "%s.%s.s%d.curve.jsonl" % (task, model, seed))) if l.strip()):
                a, b = state_metric(task, c["final_acc"])
                lines.append("| %s | %d | %d | %s | %d | %.0f | %.0f | %.0f | %.3f | %s | %s |" % (
                    SHORT[model], seed, c["step"], c["stage"], c["tokens"], c["cpu_s"], c["train_s"],
                    c["wall_s"], c["loss"], fmt(a), fmt(b)))
        lines += ["", "</details>", ""]
    page = os.path.join(out, "experiments.md")
    b, e = "<!-- state:begin -->", "<!-- state:end -->"
    text = open(page).read() if os.path.exists(page) else ""
    if b in text and e in text:
        head, rest = text.split(b, 1)
        tail = rest.split(e, 1)[1]
        with open(page + ".tmp", "w") as f:
            f.write(head + b + "\n" + "\n".join(lines) + "\n" + e + tail)
        os.replace(page + ".tmp", page)
    else:
        with open(os.path.join(out, "experiment-state.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--state":
        state_main(*sys.argv[2:10])
    else:
        main()
