#!/usr/bin/env python3
"""Writes docs/results.md from the JSON lines `pagepipe-bench --json` printed.

One table per benchmark; above each, the invocations its rows come from, each with its command,
commit, machine, load and date. The inputs are kept beside the page (docs/results/*.jsonl), so
the page is regenerated, never edited; older pages are in git.

    pagepipe-bench --json bw > docs/results/bw-idle.jsonl      # any file name under docs/results/
    python3 scripts/results.py                                  # rewrites docs/results.md
    python3 scripts/results.py --check                          # fails if docs/results.md is stale

docs/results/note.md, if present, is printed under the page's header (what the runs were for).

A JSON line is `{"bench", "transport", "config", "metrics", "runs", "ci_level", "meta", ...}`
(crates/pagepipe-bench/src/harness/report.rs): `metrics` holds each metric's median `K`, its
interval `K_ci_lo`/`K_ci_hi`, and against the baseline transport `ratio_K` with
`ratio_K_ci_lo`/`ratio_K_ci_hi` and `distinct_K`, turned so that > 1 is better. `meta` is
`{"commit", "kernel", "cpu", "cores", "cmdline", "time", "loadavg"}`. Lines that are not such
objects (a table, a progress line) are skipped, so a whole captured output can be given.
Of several invocations with the same command line only the newest is shown (`--all`: every one).
"""

import argparse
import glob
import json
import os
import re
import sys
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each benchmark measures, and its table's columns: (metric, heading, divisor, decimals),
# as the benchmark's own table prints them (crates/pagepipe-bench/src/workloads/*.rs).
BENCHES = OrderedDict(
    [
        ("bw", ("lmbench bw_pipe / bw_unix: bandwidth of 64 KiB writes",
                [("mbps", "MB/s", 1, 0), ("cpu_s_per_gib", "CPU s / GiB", 1, 3)])),
        ("lat", ("lmbench lat_pipe / lat_unix: 1-byte round trip",
                 [("lat_avg_ns", "avg µs", 1e3, 2), ("lat_p99_ns", "p99 µs", 1e3, 2)])),
        ("pipe", ("pipe_bench (seed 000): writers and readers on one pipe, 64 KiB messages",
                  [("mbps", "MB/s", 1, 0), ("lat_avg_ns", "write avg µs", 1e3, 2),
                   ("lat_p99_ns", "write p99 µs", 1e3, 1), ("minor_faults", "page faults", 1, 0)])),
        ("async", ("tokio: bandwidth and round trip between tasks or processes",
                   [("mbps", "MB/s", 1, 0), ("lat_avg_ns", "avg µs", 1e3, 2),
                    ("lat_p99_ns", "p99 µs", 1e3, 2)])),
        ("splice", ("seed 002: pipe, splice and vmsplice",
                    [("mbps", "MB/s", 1, 0), ("cpu_s", "CPU s", 1, 2)])),
        ("idle", ("an idle reader blocked on an empty pipe",
                  [("cpu_pct", "% of a core", 1, 3)])),
        ("peer-death", ("a peer killed with SIGKILL: time until the other side notices",
                        [("detect_p50_ms", "detect p50 ms", 1, 2),
                         ("detect_p99_ms", "detect p99 ms", 1, 2),
                         ("detect_max_ms", "detect max ms", 1, 2), ("hangs", "hangs", 1, 0),
                         ("late_bytes", "bytes accepted >2 ms after", 1, 0),
                         ("lost", "records lost", 1, 0), ("torn", "records torn", 1, 0)])),
        ("notify", ("notification pipes: posts per second and loss",
                    [("posts_per_s", "M posts/s", 1e6, 2), ("records_per_s", "M records/s", 1e6, 2),
                     ("loss_pct", "lost %", 1, 1)])),
        ("frag", ("seed 004: page_frag_test and loopback receive paths",
                  [("ns_per_frag", "ns/frag", 1, 1), ("msgs_per_s", "kmsg/s", 1e3, 1),
                   ("mbps", "MB/s", 1, 0), ("cpu_ns_per_msg", "receiver CPU ns/msg", 1, 0),
                   ("minor_faults", "minor faults", 1, 0)])),
        ("dontcache", ("seed 003: buffered, O_DIRECT, RWF_DONTCACHE and pagepipe's writer",
                       [("mbps", "MB/s incl fsync", 1, 0), ("lat_p999_ns", "write p99.9 µs", 1e3, 0),
                        ("peak_dirty_kib", "peak dirty MiB", 1024, 0),
                        ("cache_left_pct", "cache left %", 1, 1),
                        ("competitor_mbps", "competitor MB/s", 1, 0)])),
        ("scale", ("what one pipe costs, and how many a process holds",
                   [("create_drop_p50_ns", "create+drop p50 µs", 1e3, 2),
                    ("fds_per_pipe", "fds / idle pipe", 1, 2),
                    ("rss_kib_per_pipe", "RSS KiB / pipe", 1, 1), ("live_pipes", "live pipes", 1, 0)])),
    ]
)


def records(paths):
    """Every benchmark JSON object in the files, in file and line order."""
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: not JSON: {e}")
                if all(k in rec for k in ("bench", "transport", "config", "metrics")):
                    rec["_file"] = os.path.relpath(path, ROOT)
                    yield rec


def invocation_key(rec):
    meta = rec.get("meta") or {}
    return (meta.get("time", ""), meta.get("cmdline", rec["_file"]))


def load_of(meta):
    """The machine's load: the 1-minute load average at the start, and `--load N` if given."""
    parts = []
    avg = meta.get("loadavg")
    if avg:
        parts.append(f"load average {avg[0]:.2f} at the start (5 min {avg[1]:.2f})")
    else:
        parts.append("load average not recorded")
    n = meta.get("load")
    if n is None:
        m = re.search(r"--load[ =](\d+)", meta.get("cmdline", ""))
        n = int(m.group(1)) if m else 0
    if n:
        parts.append(f"{n} busy loop{'s' if n > 1 else ''} beside it (`--load {n}`)")
    else:
        parts.append("no busy loop beside it (rows titled '· N busy loops' ran with N)")
    return "; ".join(parts)


def fmt(value, div, dec):
    if value is None:
        return "–"
    v = value / div
    return f"{v:,.{dec}f}"


def cell(metrics, key, div, dec):
    med = metrics.get(key)
    if med is None:
        return ""
    lo, hi = metrics.get(f"{key}_ci_lo"), metrics.get(f"{key}_ci_hi")
    text = fmt(med, div, dec)
    if lo is not None and hi is not None and (lo != med or hi != med):
        text += f" [{fmt(lo, div, dec)}, {fmt(hi, div, dec)}]"
    return text


def ratio_cell(metrics, key, is_base):
    r = metrics.get(f"ratio_{key}")
    if r is None:
        return "base" if is_base and key in metrics else ""
    lo, hi = metrics.get(f"ratio_{key}_ci_lo"), metrics.get(f"ratio_{key}_ci_hi")
    text = f"{r:.2f}x"
    if lo is not None and hi is not None:
        text += f" [{lo:.2f}, {hi:.2f}]"
    if metrics.get(f"distinct_{key}") is False:
        text += " (noise)"
    return text


def split_config(recs):
    """An invocation's configuration keys: those that tell its cases apart (the table's `case`
    column), those every line shares (key, value), and those only some transports report, with
    one value each (key, value, transports); a transport's key with several values tells cases
    apart too."""
    def same(values):
        return len({json.dumps(v, sort_keys=True) for v in values}) == 1

    keys = []
    for r in recs:
        keys += [k for k in r["config"] if k not in keys]
    varying, common, own = [], [], []
    for k in keys:
        having = [r for r in recs if k in r["config"]]
        values = [r["config"][k] for r in having]
        if not same(values):
            varying.append(k)
        elif len(having) == len(recs):
            common.append((k, values[0]))
        else:
            transports = list(OrderedDict.fromkeys(r["transport"] for r in having))
            own.append((k, values[0], transports))
    return varying, sorted(common), own


def show(value):
    return value if isinstance(value, str) else json.dumps(value)


def case_label(config, varying):
    return ", ".join(f"{k} {show(config[k])}" for k in varying if k in config) or "–"


def columns_for(bench, recs):
    known = BENCHES.get(bench, ("", []))[1]
    present = [c for c in known if any(c[0] in r["metrics"] for r in recs)]
    if present:
        return present
    # An unknown benchmark: every metric that has a ratio (else every metric), as measured.
    keys = []
    for r in recs:
        for k in r["metrics"]:
            base = k[len("ratio_"):] if k.startswith("ratio_") else None
            if base and not re.search(r"_ci_(lo|hi)$", base) and base not in keys:
                keys.append(base)
    if not keys:
        keys = [k for k in recs[0]["metrics"] if not re.search(r"_ci_(lo|hi)$", k)]
    return [(k, k, 1, 2) for k in keys]


def invocation_line(n, meta, recs):
    runs = sorted({r.get("runs") for r in recs if r.get("runs")})
    level = min(((r.get("ci_level") or {}).get("median") or 1) for r in recs)
    cmd = meta.get("cmdline", "?")
    machine = f"{meta.get('cpu', '?')}, {meta.get('cores', '?')} cores, Linux {meta.get('kernel', '?')}"
    when = meta.get("time", "?").replace("T", " ").replace("Z", " UTC")
    runs_text = "/".join(str(x) for x in runs) or "?"
    interval = f"{round(level * 100)}%" if level < 0.95 else "95%"
    return (f"- **[{n}]** `{cmd}` · commit `{meta.get('commit', '?')}` · {machine} · "
            f"{load_of(meta)} · {when} · {runs_text} runs per transport, intervals ≥ {interval} "
            f"(`{recs[0]['_file']}`)")


def bench_section(bench, invocations):
    title, _ = BENCHES.get(bench, ("", []))
    out = [f"## {bench}", ""]
    if title:
        out += [title + ".", ""]
    all_recs = [r for _, recs in invocations for r in recs]
    cols = columns_for(bench, all_recs)
    for n, (meta, recs) in enumerate(invocations, 1):
        out.append(invocation_line(n, meta, recs))
    out.append("")
    head = ["run", "case", "transport"]
    for _, heading, _, _ in cols:
        head += [heading + " [95% CI]", "vs base"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    notes = {}
    for n, (meta, recs) in enumerate(invocations, 1):
        varying, common, own = split_config(recs)
        notes[n] = ", ".join(f"{k} {show(v)}" for k, v in common)
        if own:
            notes[n] += "; " if notes[n] else ""
            notes[n] += ", ".join(f"{k} {show(v)} ({'/'.join(t)})" for k, v, t in own)
        for r in recs:
            m = r["metrics"]
            is_base = not any(k.startswith("ratio_") for k in m)
            row = [f"[{n}]", case_label(r["config"], varying), r["transport"]]
            for key, _, div, dec in cols:
                row += [cell(m, key, div, dec), ratio_cell(m, key, is_base)]
            out.append("| " + " | ".join(row) + " |")
    out.append("")
    for n, text in notes.items():
        if text:
            out.append(f"[{n}] every case: {text}.  ")
    out.append("")
    return out


HEADER = """# pagepipe-bench results

Generated by `python3 scripts/results.py` from the JSON lines in [results/](results/) (one file
per `pagepipe-bench --json` invocation); do not edit by hand. One table per benchmark; above
it, each invocation its rows come from: the command, the commit, the machine, its load (the
1-minute load average when the invocation started, and `--load N` where the benchmark ran busy
loops beside itself) and the date. A median carries its distribution-free interval (order
statistics); `vs base` is the ratio to the invocation's baseline transport (the first listed,
or `--baseline`) with the interval of the ratio itself, turned so that > 1 is better;
`(noise)` means that interval holds 1. How the numbers are made and how many runs a comparison
needs: [benchmarks.md](benchmarks.md). Absolute numbers on this shared 2-vCPU machine drift
with what else runs; ratios from one invocation hold better.

To add or refresh a table: `pagepipe-bench --json SUBCOMMAND ... > docs/results/NAME.jsonl`,
then `python3 scripts/results.py` (`--check` fails when this page is stale). The diary this page
used to be (every session's tables, 2026-11-22 to 2026-11-27) is in git:
`git show {diary}:docs/results.md`; the other docs quote its sections by name.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", help="JSON lines files (default: docs/results/*.jsonl)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results.md"))
    ap.add_argument("--all", action="store_true",
                    help="every invocation, not only the newest per command line")
    ap.add_argument("--check", action="store_true", help="fail if --out differs; write nothing")
    ap.add_argument("--diary", default="cd472dd",
                    help="the commit whose docs/results.md was the diary")
    args = ap.parse_args()
    paths = args.inputs or sorted(glob.glob(os.path.join(ROOT, "docs", "results", "*.jsonl")))
    if not paths:
        sys.exit("no input: give JSON lines files or put them in docs/results/")

    # bench -> invocation (time, cmdline) -> records, newest invocation first.
    by_bench = {}
    for rec in records(paths):
        by_bench.setdefault(rec["bench"], OrderedDict()).setdefault(invocation_key(rec), []).append(rec)
    out = [HEADER.replace("{diary}", args.diary)]
    # What the tables' runs were for and how far they go (who ran them, what is still to rerun).
    note = os.path.join(ROOT, "docs", "results", "note.md")
    if not args.inputs and os.path.exists(note):
        with open(note, encoding="utf-8") as f:
            out.append(f.read().rstrip("\n") + "\n")
    order = [b for b in BENCHES if b in by_bench] + sorted(b for b in by_bench if b not in BENCHES)
    out.append("Benchmarks: " + ", ".join(f"[{b}](#{b})" for b in order) + ".\n")
    for bench in order:
        invs = sorted(by_bench[bench].items(), key=lambda kv: kv[0][0], reverse=True)
        if not args.all:
            seen, kept = set(), []
            for key, recs in invs:
                cmd = key[1]
                if cmd not in seen:
                    seen.add(cmd)
                    kept.append((key, recs))
            invs = kept
        out += bench_section(bench, [(recs[0].get("meta") or {}, recs) for _, recs in invs])
    text = "\n".join(out).rstrip("\n") + "\n"
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current != text:
            sys.exit(f"{os.path.relpath(args.out, ROOT)} is stale: run python3 scripts/results.py")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(args.out, ROOT)}: {len(order)} benchmarks from {len(paths)} files",
          file=sys.stderr)


if __name__ == "__main__":
    main()
