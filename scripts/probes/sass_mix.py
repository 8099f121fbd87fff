#!/usr/bin/env python3
"""Opcode histogram of the kernels whose mangled name contains PATTERN, from
`cuobjdump -sass BINARY` (static counts: every instruction of the function
once; unrolled loops dominate).
  sass_mix.py BINARY PATTERN [TOP]
BINARY may also be a saved dump (a .txt or .txt.gz file of cuobjdump -sass
output, e.g. gpu_check's sass_dump.txt.gz), read where no cuobjdump exists.
"""
import gzip
import collections
import re
import subprocess
import sys


def main(binary, pattern, top=40):
    if binary.endswith(".gz"):
        with gzip.open(binary, "rt") as f:
            out = f.read()
    elif binary.endswith(".txt"):
        with open(binary) as f:
            out = f.read()
    else:
        out = subprocess.run(["cuobjdump", "-sass", binary], capture_output=True, text=True, check=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = collections.Counter()
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and cur:
            funcs[cur][m.group(2).split(".")[0]] += 1
    picked = [f for f in funcs if pattern in f]
    if not picked:
        print("sass_mix: no function matches", pattern)
        return 1
    for f in picked:
        c = funcs[f]
        print(f"{f}: {sum(c.values())} instructions")
        print("  " + "  ".join(f"{op} {n}" for op, n in c.most_common(int(top))))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
