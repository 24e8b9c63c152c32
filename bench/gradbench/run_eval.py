#!/usr/bin/env python3
"""Runs one GradBench eval against one tool without GradBench's Rust CLI: the small intermediary
`gradbench run` would be. Each eval message goes to the tool, each tool response back to the eval,
one line each way; both are checked as the CLI checks them (matching ids, success with an output
and without an error) and logged. Standard library only.

  run_eval.py --eval 'python3 .../evals/lse/run.py -n 1000' --tool 'build/.../dualcast_gradbench' \
      [--cwd GRADBENCH_ROOT] [--log session.jsonl] [--summary results.jsonl] [--tool-name dualcast]

Prints one line per evaluate (module::function, description, valid / invalid / failed, the mean
evaluate time); exit status 0 when every define and evaluate succeeded and every analysis was
valid, 1 otherwise.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--cwd", default=None, help="working folder of the eval (GradBench's root)")
    ap.add_argument("--log", default=None, help="write every message and response here")
    ap.add_argument("--summary", default=None, help="append one JSON line per evaluate here")
    ap.add_argument("--tool-name", default="dualcast")
    args = ap.parse_args()

    ev = subprocess.Popen(shlex.split(args.eval), cwd=args.cwd, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, bufsize=1)
    tool = subprocess.Popen(shlex.split(args.tool), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1)
    log = open(args.log, "w") if args.log else None
    summary = open(args.summary, "a") if args.summary else None
    pending = {}  # evaluate id -> its summary record, completed by the analysis
    ok = True
    start = time.monotonic()
    for line in ev.stdout:
        message = json.loads(line)
        tool.stdin.write(json.dumps(message) + "\n")
        tool.stdin.flush()
        answer = tool.stdout.readline()
        if not answer:
            print("error: the tool closed its output", file=sys.stderr)
            ok = False
            break
        response = json.loads(answer)
        if log:
            elapsed = int((time.monotonic() - start) * 1e9)
            log.write(json.dumps({"elapsed": {"nanoseconds": elapsed}, "message": message}) + "\n")
            log.write(json.dumps({"elapsed": {"nanoseconds": elapsed}, "response": response}) + "\n")
        if response.get("id") != message["id"]:
            print(f"error: response id {response.get('id')} to message {message['id']}",
                  file=sys.stderr)
            ok = False
            break
        kind = message["kind"]
        if kind in ("define", "evaluate"):
            if response.get("success") and "error" in response:
                print("error: the tool reported success but gave an error", file=sys.stderr)
                ok = False
            if kind == "evaluate" and response.get("success") and "output" not in response:
                print("error: the tool reported success but gave no output", file=sys.stderr)
                ok = False
        if kind == "define" and not response.get("success"):
            print(f"undefined: {message['module']}: {response.get('error')}")
            ok = False
        if kind == "evaluate":
            times = [t["nanoseconds"] for t in response.get("timings", [])
                     if t["name"] == "evaluate"]
            record = {"tool": args.tool_name, "module": message["module"],
                      "function": message["function"],
                      "description": message.get("description"),
                      "success": bool(response.get("success")),
                      "runs": len(times),
                      "mean_ms": sum(times) / len(times) / 1e6 if times else None,
                      "median_ms": statistics.median(times) / 1e6 if times else None,
                      "min_ms": min(times) / 1e6 if times else None,
                      # (every timing where they are few; a fast evaluate's hundreds of
                      # thousands stay in the session log only)
                      "evaluate_ns": times if len(times) <= 100 else None}
            if not response.get("success"):
                record["valid"] = None
                record["error"] = response.get("error")
                ok = False
                report(record, summary)
            else:
                pending[message["id"]] = record
        if kind == "analysis":
            record = pending.pop(message["of"], None)
            if record is not None:
                record["valid"] = bool(message["valid"])
                if not message["valid"]:
                    record["error"] = message.get("error")
                    ok = False
                report(record, summary)
        ev.stdin.write(json.dumps(response) + "\n")
        ev.stdin.flush()
    ev.stdin.close()
    tool.stdin.close()  # end of the session: the tool must exit on end of input
    ev.wait()
    tool.wait(timeout=60)
    if ev.returncode != 0:
        print(f"error: the eval exited with status {ev.returncode}", file=sys.stderr)
        ok = False
    return 0 if ok else 1


def report(record, summary):
    verdict = ("failed: " + str(record.get("error"))) if not record["success"] else (
        "valid" if record["valid"] else "INVALID: " + str(record.get("error"))[:300])
    mean = f"{record['mean_ms']:.3f} ms x {record['runs']}" if record["mean_ms"] is not None else ""
    print(f"{record['module']}::{record['function']:<10} {record['description'] or '':<22} "
          f"{mean:<20} {verdict}", flush=True)
    if summary:
        summary.write(json.dumps(record) + "\n")
        summary.flush()


if __name__ == "__main__":
    sys.exit(main())
