#!/usr/bin/env python3
"""Replays the recorded GradBench sessions of tests/gradbench/fixtures/ against the tool and checks
every answer: the protocol (ids echoed, one line per message, success without error and with an
output, one evaluate timing per run and at least min_runs of them, unknown modules and functions
and malformed messages answered with success false, exit at end of input) and the outputs, against
the plain-Python references of references.py (values) and central differences of them
(derivatives), within GradBench's rule |x - y| / max(1, |x| + |y|) <= 1e-4 -- tighter here: 1e-6.
Standard library only.

  check_tool.py TOOL [SESSION...]     (default: every fixture)
"""
import json
import os
import subprocess
import sys

import references as ref

here = os.path.dirname(os.path.abspath(__file__))
failures = []


def fail(session, what):
    failures.append(f"{session}: {what}")


def close(a, b, tol=1e-6):
    return abs(a - b) / max(1.0, abs(a) + abs(b)) <= tol


def compare(session, what, got, want, tol=1e-6):
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return fail(session, f"{what}: expected {len(want)} values, got {got!r:.200}")
        for i, (g, w) in enumerate(zip(got, want)):
            compare(session, f"{what}[{i}]", g, w, tol)
    elif not isinstance(got, (int, float)) or not close(got, want, tol):
        fail(session, f"{what}: {got!r} != {want!r}")


def flat(rows):
    return [v for r in rows for v in r]


def shaped(v, rows, cols):
    return [v[r * cols:(r + 1) * cols] for r in range(rows)]


# ---- the expected output of each evaluate -------------------------------------------------------
def check_lse(s, fn, inp, out):
    x = inp["x"]
    if fn == "primal":
        compare(s, "lse", out, ref.lse(x))
    else:
        compare(s, "d lse / dx", out, ref.central_gradient(ref.lse, x))


def check_lstm(s, fn, inp, out):
    main, extra = inp["main_params"], inp["extra_params"]
    rows, cols, b = len(main), len(main[0]), len(extra[0])

    def f(v):
        m = shaped(v[:rows * cols], rows, cols)
        e = shaped(v[rows * cols:], 3, b)
        return ref.lstm(m, e, inp["state"], inp["sequence"])

    if fn == "objective":
        compare(s, "loss", out, f(flat(main) + flat(extra)))
    else:
        compare(s, "gradient", out, ref.central_gradient(f, flat(main) + flat(extra)))


def check_gmm(s, fn, inp, out):
    k, d = inp["k"], inp["d"]
    t = d * (d - 1) // 2
    parts = [("alpha", 1, k), ("mu", k, d), ("q", k, d), ("l", k, t)]

    def unpack(v):
        a, i = {}, 0
        for name, r, c in parts:
            a[name] = v[i:i + r * c] if name == "alpha" else shaped(v[i:i + r * c], r, c)
            i += r * c
        return a

    x0 = inp["alpha"] + flat(inp["mu"]) + flat(inp["q"]) + flat(inp["l"])
    f = lambda v: ref.gmm(inp, **unpack(v))
    if fn == "objective":
        return compare(s, "log posterior", out, f(x0))
    if not isinstance(out, dict) or sorted(out) != ["alpha", "l", "mu", "q"]:
        return fail(s, f"gmm jacobian: expected keys alpha, l, mu, q, got {out!r:.200}")
    want = unpack(ref.central_gradient(f, x0))
    for name, _, _ in parts:
        compare(s, "d/d" + name, out[name], want[name], 1e-5)


def check_kmeans(s, fn, inp, out):
    pts, cen = inp["points"], inp["centroids"]
    k, d = len(cen), len(cen[0])
    f = lambda v: ref.kmeans(pts, shaped(v, k, d))
    if fn == "cost":
        return compare(s, "cost", out, f(flat(cen)))
    g = ref.central_gradient(f, flat(cen))
    h = [ref.central_second(f, flat(cen), i) for i in range(k * d)]
    compare(s, "dir", flat(out) if isinstance(out, list) else out,
            [gi / hi for gi, hi in zip(g, h)], 1e-5)


def check_ba(s, fn, inp, out):
    n, m, p, w = inp["n"], inp["m"], inp["p"], inp["w"]
    if fn == "objective":
        e = ref.ba_reprojection(inp["cam"], inp["x"], w, inp["feat"])
        want = {"reproj_error": {"elements": e, "repeated": p},
                "w_err": {"element": 1 - w * w, "repeated": p}}
        if not isinstance(out, dict) or out.keys() != want.keys():
            return fail(s, f"ba objective: {out!r:.200}")
        compare(s, "reproj_error", out["reproj_error"]["elements"], e)
        compare(s, "w_err", out["w_err"]["element"], 1 - w * w)
        if out["reproj_error"]["repeated"] != p or out["w_err"]["repeated"] != p:
            fail(s, "ba objective: repeated != p")
        return
    # observation 0's two Jacobian rows (11 camera, 3 point, 1 weight parameters), by central
    # differences, in the CSR layout; rows/cols from the sparsity pattern; last: d(1 - w^2)/dw
    params = inp["cam"] + inp["x"] + [w]
    rows_x = ref.central_gradient(
        lambda v: ref.ba_reprojection(v[:11], v[11:14], v[14], inp["feat"])[0], params)
    rows_y = ref.central_gradient(
        lambda v: ref.ba_reprojection(v[:11], v[11:14], v[14], inp["feat"])[1], params)
    nrows = 3 * p
    rows = [15 * min(i, 2 * p) + max(0, i - 2 * p) for i in range(nrows + 1)]
    cols = []
    for i in range(p):
        for _ in range(2):
            cols += [11 * (i % n) + a for a in range(11)] + \
                    [11 * n + 3 * (i % m) + a for a in range(3)] + [11 * n + 3 * m + i]
    cols += [11 * n + 3 * m + i for i in range(p)]
    cut = lambda a: a[:30] + [a[-1]]
    if not isinstance(out, dict) or sorted(out) != ["cols", "rows", "vals"]:
        return fail(s, f"ba jacobian: {out!r:.200}")
    if out["rows"] != cut(rows) or out["cols"] != cut(cols):
        fail(s, f"ba jacobian pattern: rows {out['rows']} cols {out['cols']}")
    compare(s, "vals", out["vals"], (rows_x + rows_y)[:30] + [-2 * w], 1e-5)


def check_llsq(s, fn, inp, out):
    f = lambda v: ref.llsq(v, inp["n"])
    if fn == "primal":
        compare(s, "llsq", out, f(inp["x"]))
    else:
        compare(s, "d llsq / dx", out, ref.central_gradient(f, inp["x"]))


def check_ode(s, fn, inp, out):
    if fn == "primal":
        compare(s, "y(2)", out, ref.ode(inp["x"], inp["s"]))
    else:
        compare(s, "d y_last / dx", out,
                ref.central_gradient(lambda v: ref.ode(v, inp["s"])[-1], inp["x"]))


def check_det(s, fn, inp, out):
    a, n = inp["A"], inp["ell"]
    if fn == "primal":
        compare(s, "det", out, ref.det(a, n))
    else:
        compare(s, "d det / dA", out, ref.central_gradient(lambda v: ref.det(v, n), a))


def check_ht(s, fn, inp, out):
    us = flat(inp["us"])
    f = lambda theta, u: ref.ht_objective(theta, u, inp["data"])
    if fn == "objective":
        return compare(s, "residuals", out, f(inp["theta"], us))
    rows = len(inp["data"]["correspondences"]) * 3
    # columns: (d/du0, d/du1 of the row's own point,) then d/dtheta
    want = [[] for _ in range(rows)]

    def column(fi, x0):  # d residual_r / d x at x0, all rows, by central differences
        step = 1e-6 * max(1.0, abs(x0))
        up, down = fi(x0 + step), fi(x0 - step)
        return [(a - b) / (2 * step) for a, b in zip(up, down)]

    if us:  # each row's own point's u0 and u1
        for k in range(2):
            for i in range(rows // 3):
                def fu(x, i=i, k=k):
                    u = list(us)
                    u[2 * i + k] = x
                    return f(inp["theta"], u)
                col = column(fu, us[2 * i + k])
                for j in range(3):
                    want[3 * i + j].append(col[3 * i + j])
    for c in range(26):
        def ft(x, c=c):
            t = list(inp["theta"])
            t[c] = x
            return f(t, us)
        for r, v in enumerate(column(ft, inp["theta"][c])):
            want[r].append(v)
    if not isinstance(out, list) or len(out) != rows:
        return fail(s, f"ht jacobian: expected {rows} rows, got {out!r:.200}")
    for r in range(rows):
        compare(s, f"jacobian[{r}]", out[r], want[r], 1e-5)


# Reverse over reverse is refused (particle.hpp / saddle.hpp say why); fr runs (its inner
# reverse pass on a tape over duals) and is checked like ff and rf.
refused = {("particle", "rr"), ("saddle", "rr")}


def check_particle(s, fn, inp, out):
    # GradBench's own answer (evals/particle) and a reimplementation with central differences
    compare(s, "w", out, 0.2071918746486116, 1e-4)
    compare(s, "w (differences)", out, ref.particle(inp["w"]), 1e-4)


def check_saddle(s, fn, inp, out):
    compare(s, "p, q", out, [8.246324826140356e-06] * 4, 1e-4)
    compare(s, "p, q (differences)", out, ref.saddle(inp["start"]), 1e-4)
    if isinstance(out, list) and any(abs(v) > 1e-4 for v in out if isinstance(v, (int, float))):
        fail(s, f"saddle {fn}: {out} is not near the saddle point 0")


checks = {"det": check_det, "ht": check_ht, "particle": check_particle, "saddle": check_saddle,
          "lse": check_lse, "llsq": check_llsq, "ode": check_ode, "lstm": check_lstm, "gmm": check_gmm, "kmeans": check_kmeans,
          "ba": check_ba}


# ---- sessions -----------------------------------------------------------------------------------
def replay(tool, name):
    """Runs the tool on a session; returns (message or raw line, response) pairs."""
    with open(os.path.join(here, "fixtures", name + ".jsonl")) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    proc = subprocess.run([tool], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        fail(name, f"the tool exited with status {proc.returncode}: {proc.stderr[-500:]}")
    answers = proc.stdout.splitlines()
    if len(answers) != len(lines):
        fail(name, f"{len(lines)} messages but {len(answers)} response lines")
    pairs = []
    for line, answer in zip(lines, answers):
        try:
            response = json.loads(answer)
        except ValueError:
            fail(name, f"response is not JSON: {answer!r:.200}")
            continue
        if not isinstance(response, dict):
            fail(name, f"response is not an object: {answer!r:.200}")
            continue
        try:
            message = json.loads(line)
        except ValueError:
            message = line
        pairs.append((message, response))
    return pairs


def check_common(name, message, response):
    """The rules every response follows."""
    if isinstance(message, dict) and isinstance(message.get("id"), int):
        if response.get("id") != message["id"]:
            fail(name, f"id {message['id']} answered with id {response.get('id')}")
    elif response.get("id") is not None or response.get("success") is not False:
        fail(name, f"malformed message {message!r:.80} answered with {response!r:.200}")
    if response.get("success") and "error" in response:
        fail(name, f"success together with an error: {response!r:.200}")
    kind = message.get("kind") if isinstance(message, dict) else None
    if kind == "evaluate" and response.get("success"):
        if "output" not in response:
            fail(name, "success without output")
        timings = response.get("timings", [])
        runs = [t for t in timings if t.get("name") == "evaluate"]
        if not all(isinstance(t.get("nanoseconds"), int) and t["nanoseconds"] >= 0
                   for t in timings):
            fail(name, f"timings must be non-negative integers: {timings}")
        if len(runs) < message["input"].get("min_runs", 1):
            fail(name, f"{len(runs)} evaluate timings, min_runs {message['input']['min_runs']}")


def check_module_session(tool, name):
    for message, response in replay(tool, name):
        check_common(name, message, response)
        kind = message["kind"]
        if kind == "start" and response.get("tool") != "dualcast":
            fail(name, f"start: {response}")
        if kind == "define" and response != {"id": message["id"], "success": True}:
            fail(name, f"define: {response}")
        if kind == "analysis" and response != {"id": message["id"]}:
            fail(name, f"analysis: {response}")
        if kind == "evaluate" and (message["module"], message["function"]) in refused:
            if response.get("success") is not False or "tape" not in response.get("error", ""):
                fail(name, f"{message['function']} should be refused with its reason: {response}")
        elif kind == "evaluate":
            if not response.get("success"):
                fail(name, f"{message['function']} failed: {response.get('error')}")
            else:
                checks[message["module"]](name, message["function"], message["input"],
                                          response["output"])


def check_protocol_session(tool):
    name = "protocol"
    pairs = replay(tool, name)
    by_id = {}
    for message, response in pairs:
        check_common(name, message, response)
        if isinstance(message, dict) and "id" in message:
            by_id[message["id"]] = response
    expect_failure = [1, 3, 8, 9, 10, 11, 12, 13]  # unknown module / function, bad inputs
    for i in expect_failure:
        r = by_id.get(i, {})
        if r.get("success") is not False or not r.get("error"):
            fail(name, f"message {i} should fail with an error, got {r}")
    if by_id.get(2) != {"id": 2, "success": True}:
        fail(name, f"define lse: {by_id.get(2)}")
    runs = [t for t in by_id.get(4, {}).get("timings", []) if t["name"] == "evaluate"]
    if len(runs) != 4:
        fail(name, f"min_runs 4 (min_seconds 0) gave {len(runs)} evaluate timings")
    for i in (14, 15):
        if by_id.get(i) != {"id": i}:
            fail(name, f"message {i} should be acknowledged with its id only: {by_id.get(i)}")
    # sizes and repetitions beyond the tool's limits: refused, naming what was asked
    for i, says in ((16, "n x m"), (17, "s steps"), (18, "cameras"), (19, "min_runs"),
                    (20, "min_seconds")):
        r = by_id.get(i, {})
        if r.get("success") is not False or says not in r.get("error", ""):
            fail(name, f"message {i} should fail with an error naming {says!r}, got {r}")
    r = by_id.get(21, {})
    runs = [t for t in r.get("timings", []) if t["name"] == "evaluate"]
    if not r.get("success") or len(runs) != 1 or not close(r.get("output", 0), ref.lse([1.0, 2.0])):
        fail(name, f"min_runs 0 should still run once and answer: {r}")
    malformed = [r for m, r in pairs if not isinstance(m, dict) or "id" not in m]
    if len(malformed) != 3:
        fail(name, f"3 malformed lines should get 3 answers with id null, got {len(malformed)}")


def main():
    tool = sys.argv[1]
    if not os.access(tool, os.X_OK):  # a build of other targets only (CI's sanitizer stage)
        print(f"DUALCAST_SKIPPED: the tool {tool} is not built")
        return 77
    names = sys.argv[2:] or ["protocol", "lse", "lstm", "gmm", "kmeans", "ba", "llsq", "ode",
                             "det", "ht_simple", "ht_complicated", "particle", "saddle"]
    for name in names:
        before = len(failures)
        if name == "protocol":
            check_protocol_session(tool)
        else:
            check_module_session(tool, name)
        print(f"{name}: {'ok' if len(failures) == before else 'FAILED'}")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
