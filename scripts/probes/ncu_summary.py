#!/usr/bin/env python3
"""Per-kernel GPU times from `ncu --csv --metrics gpu__time_duration.sum` of
`bench_cuda --profile` (one QVG encode, two decodes, one QVG-Pro encode, two
decodes, one QVG encode with its k-means++ start, two decodes, one code=cq
encode, two decodes). Prints, for each encode, its kernels in launch order of first use:
launches, total and mean microseconds, and the encode's total.
  ncu_summary.py NCU_CSV_LOG
"""
import csv
import re
import sys


def short(name):
    name = re.sub(r"\(.*$", "", name.replace("void ", "").replace("qvg::cuda::", ""))
    return name.replace("__nv_bfloat16", "bf16")[:90]


def main(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    reader = csv.reader(lines)
    header = None
    for rec in reader:
        if header is None:
            if "Kernel Name" in rec and "Metric Value" in rec:
                header = rec
            continue
        r = dict(zip(header, rec))
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        us = value / 1000.0 if unit == "ns" else value * 1000.0 if unit == "ms" else value
        rows.append((short(r["Kernel Name"]), us))
    if not rows:
        print("ncu_summary: no gpu__time_duration.sum rows in", path)
        return 1
    # Segments: the launches before each run of decode kernels are one encode.
    segments, cur, in_decode = [], [], False
    for name, us in rows:
        is_decode = "decode" in name
        if is_decode and not in_decode and cur:
            segments.append(cur)
            cur = []
        in_decode = is_decode
        if not is_decode:
            cur.append((name, us))
    if cur:
        segments.append(cur)
    labels = ["QVG encode (LongCat, iters=2)", "QVG-Pro encode (LongCat, iters=5)",
              "QVG encode, k-means++ start (LongCat, iters=2)", "code=cq encode (LongCat, G2 K16, iters=2)"]
    for label, seg in zip(labels, segments):
        agg = {}
        for name, us in seg:
            n, t = agg.get(name, (0, 0.0))
            agg[name] = (n + 1, t + us)
        total = sum(t for _, t in agg.values())
        print(f"{label}: {total:.1f} us of kernels in {len(seg)} launches")
        for name, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            print(f"  {t:9.1f} us  {n:4d} x {t / n:8.1f} us  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
