#!/usr/bin/env python3
"""Where one kernel's time goes, instruction by instruction, from ncu's source page.

    ncu ... --section SourceCounters --section WarpStateStats -o rep <program>
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    scripts/sass_hotspots.py sass.csv [--top N]

Prints the stall reasons over all warp samples, the instructions with the most
samples (and their top reasons), and the executed instruction mix by opcode
(warp-level executions), so a change can be aimed at what the warps wait on.
"""
import argparse
import csv
import sys
from collections import Counter


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    a = ap.parse_args()
    try:
        rows = list(csv.reader(open(a.csv, newline="")))
    except OSError as e:
        sys.exit(f"sass_hotspots.py: {e}")
    # Row 0 names the kernel; row 1 is the header.
    head = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
    if head is None:
        sys.exit(f"sass_hotspots.py: {a.csv} has no source-page header (Address, Source, ...)")
    hdr, data = rows[head], [r for r in rows[head + 1:] if len(r) == len(rows[head])]
    ix = {h: i for i, h in enumerate(hdr)}
    need = ["Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
    missing = [n for n in need if n not in ix]
    if missing:
        sys.exit(f"sass_hotspots.py: columns missing: {', '.join(missing)} (collect SourceCounters)")
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, col):
        v = r[ix[col]].replace(",", "")
        return int(v) if v.isdigit() else 0

    total = sum(num(r, need[1]) for r in data)
    if rows[0]:
        print(rows[0][1] if len(rows[0]) > 1 else rows[0][0])
    print(f"{len(data)} instructions, {total} warp samples")
    by_reason = Counter({s[6:]: sum(num(r, s) for r in data) for s in stalls})
    named = sum(by_reason.values())
    print("stall reasons (share of all samples):")
    for s, v in by_reason.most_common(12):
        if v:
            print(f"  {s:24s} {v:8d}  {100.0 * v / max(total, 1):5.1f} %")
    if total > named:
        print(f"  {'(no reason exported)':24s} {total - named:8d}  {100.0 * (total - named) / total:5.1f} %")
    print(f"top {a.top} instructions by samples (index, samples, warp executions, top reasons):")
    order = sorted(range(len(data)), key=lambda n: -num(data[n], need[1]))[: a.top]
    for n in order:
        r = data[n]
        top = sorted(((num(r, s), s[6:]) for s in stalls), reverse=True)[:2]
        why = " ".join(f"{s}:{v}" for v, s in top if v)
        print(f"  {n:5d} {num(r, need[1]):7d} {num(r, need[2]):10d}  {r[ix['Source']].strip()[:58]:58s} {why}")
    mix = Counter()
    for r in data:
        src = r[ix["Source"]].strip()
        op = src.split()[0] if src else "?"
        if op.startswith("@"):  # predicate guard
            op = src.split()[1] if len(src.split()) > 1 else op
        mix[op.split(".")[0]] += num(r, need[2])
    executed = sum(mix.values())
    print(f"executed instruction mix ({executed} warp instructions):")
    for op, v in mix.most_common(16):
        print(f"  {op:12s} {v:12d}  {100.0 * v / max(executed, 1):5.1f} %")


if __name__ == "__main__":
    main()
