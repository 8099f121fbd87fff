#!/usr/bin/env bash
# CLI behaviour of the model commands (generate, compare, demo, dump-kv): short
# runs (1 context chunk, 1 generated chunk) whose output files are read back
# through qvg itself, the JSON fields of compare, and bad inputs (each a
# message naming the problem and exit status 1).
# Usage: test_cli_model.sh <path to qvg> <source dir> ; prints "N passed, N failed".
set -u
qvg=$1
src=$2
clip=$src/data/clips/vtest.mp4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# Small, fast runs: 3 context frames (1 chunk), 3 generated frames, spans of 1 chunk.
SHORT="--context $clip --start 192 --context-frames 3 --frames 3 --quant-factor 1"

# expect_status1 <pattern> <args...>: exit status exactly 1 and the message on stderr.
expect_status1() {
  local pat=$1
  shift
  "$qvg" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ]; then bad "qvg $* exited $rc, expected 1: $(cat "$tmp/err")"; return; fi
  if ! grep -qi -- "$pat" "$tmp/err"; then bad "qvg $*: stderr lacks '$pat':"; cat "$tmp/err"; return; fi
  ok
}

# generate: a playable MP4 of context + generated frames (6), read back by qvg
# as the context of another run (exactly 6 frames: 9 are refused).
if "$qvg" generate $SHORT --cache qvg -o "$tmp/gen.mp4" >"$tmp/gen.txt" 2>"$tmp/err"; then
  [ -s "$tmp/gen.mp4" ] && ok || bad "generate wrote no $tmp/gen.mp4"
  grep -q "wrote .*gen.mp4: 6 frames" "$tmp/gen.txt" && ok || bad "generate output: $(cat "$tmp/gen.txt")"
  grep -q "KV memory after 2 chunks" "$tmp/gen.txt" && ok || bad "generate prints no KV memory"
  grep -q "centroids" "$tmp/gen.txt" && ok || bad "generate prints no KV parts"
  "$qvg" generate --context "$tmp/gen.mp4" --context-frames 6 --frames 3 --cache bf16 -o "$tmp/gen2.mp4" \
    >/dev/null 2>"$tmp/err" && ok || bad "the written MP4 does not read back: $(cat "$tmp/err")"
  expect_status1 "has 6 frames, need 9" generate --context "$tmp/gen.mp4" --context-frames 9 --frames 3 -o "$tmp/x.mp4"
else
  bad "generate failed: $(cat "$tmp/err")"
fi

# compare: JSON rows with the issue's fields; BF16 against itself has no finite
# PSNR (null); CSV and the gnuplot PNG of PSNR per frame.
if "$qvg" compare $SHORT --methods rtn --json --csv "$tmp/psnr.csv" --plot "$tmp/psnr.png" \
     >"$tmp/cmp.json" 2>"$tmp/err"; then
  for key in method budget reachable spec config span_bits bits ratio kv_bytes psnr ssim psnr_per_chunk ssim_per_chunk psnr_per_frame ssim_per_frame; do
    n=$(grep -c "\"$key\":" "$tmp/cmp.json")
    [ "$n" -eq 2 ] && ok || bad "JSON has $n rows with \"$key\", expected 2"
  done
  grep -q '"method": "bf16"' "$tmp/cmp.json" && grep -q '"method": "rtn"' "$tmp/cmp.json" && ok || bad "JSON methods"
  [ "$(grep -c '"psnr": null' "$tmp/cmp.json")" -eq 1 ] && ok || bad "bf16 vs bf16 PSNR is not null"
  [ "$(grep -c '"psnr": [0-9]' "$tmp/cmp.json")" -eq 1 ] && ok || bad "rtn PSNR is not a number"
  [ "$(head -1 "$tmp/psnr.csv")" = "frame,clip_frame,bf16,rtn" ] && ok || bad "CSV header: $(head -1 "$tmp/psnr.csv")"
  [ "$(wc -l <"$tmp/psnr.csv")" -eq 4 ] && ok || bad "CSV rows: $(wc -l <"$tmp/psnr.csv")"
  grep -q '^3,195,inf,[0-9]' "$tmp/psnr.csv" && ok || bad "CSV first row: $(sed -n 2p "$tmp/psnr.csv")"
  [ "$(head -c 8 "$tmp/psnr.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok || bad "--plot wrote no PNG"
else
  bad "compare failed: $(cat "$tmp/err")"
fi
# Drift: per frame PSNR / SSIM against BF16 (the --csv's values) and against
# the real frames, and K/V bytes (JSON's kv_bytes after the last chunk); the
# two drift plots are PNGs; a clip too short for --real-plot is refused first.
if "$qvg" compare $SHORT --methods rtn --json --csv "$tmp/d_psnr.csv" --drift-csv "$tmp/drift.csv" \
     --real-plot "$tmp/real.png" --kv-plot "$tmp/kv.png" >"$tmp/d.json" 2>"$tmp/err"; then
  want="frame,clip_frame"
  for m in bf16 rtn; do for c in psnr_bf16 ssim_bf16 psnr_real ssim_real kv_mb; do want="$want,${m}_$c"; done; done
  [ "$(head -1 "$tmp/drift.csv")" = "$want" ] && ok || bad "drift CSV header: $(head -1 "$tmp/drift.csv")"
  python3 - "$tmp/drift.csv" "$tmp/d_psnr.csv" "$tmp/d.json" <<'PY' && ok || bad "drift CSV values"
import csv, json, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
psnr = list(csv.DictReader(open(sys.argv[2])))
kv = {r["method"]: r["kv_bytes"] for r in json.load(open(sys.argv[3]))}
assert len(rows) == 3 == len(psnr), len(rows)
for r, p in zip(rows, psnr):
    assert r["bf16_psnr_bf16"] == "inf" and float(r["bf16_ssim_bf16"]) == 1.0
    assert abs(float(r["rtn_psnr_bf16"]) - float(p["rtn"])) < 1e-3, (r["rtn_psnr_bf16"], p["rtn"])
    for m in ("bf16", "rtn"):
        assert 5 < float(r[m + "_psnr_real"]) < 60 and 0 < float(r[m + "_ssim_real"]) <= 1
        assert abs(float(r[m + "_kv_mb"]) * 1e6 - kv[m]) <= 500, (r[m + "_kv_mb"], kv[m])
assert float(rows[0]["rtn_kv_mb"]) < float(rows[0]["bf16_kv_mb"]) / 4
PY
  for f in real kv; do
    [ "$(head -c 8 "$tmp/$f.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok || bad "--$f-plot wrote no PNG"
  done
else
  bad "compare --drift-csv failed: $(cat "$tmp/err")"
fi
expect_status1 "no real frames to compare with" compare --context "$clip" --start 230 --context-frames 3 --frames 12 \
  --methods rtn --real-plot "$tmp/r.png"
# The demo near the clip's end: no real frames to plot, so no such plot (not an error).
if "$qvg" demo --quick --start 236 --methods rtn --out "$tmp/demo_end" >/dev/null 2>"$tmp/err"; then
  [ -s "$tmp/demo_end/kv_bytes.png" ] && [ ! -e "$tmp/demo_end/psnr_vs_real.png" ] && ok ||
    bad "demo at the clip's end: $(ls "$tmp/demo_end")"
else
  bad "demo --quick --start 236 failed: $(cat "$tmp/err")"
fi
# Without gnuplot, --plot is refused before any run.
QVG_GNUPLOT=/nonexistent/gnuplot expect_status1 "gnuplot-nox" compare $SHORT --methods rtn --plot "$tmp/p.png"
# The PSNR plot's y axis fits the data: from 5 dB below the lowest finite value to 5 dB above the
# highest, both on 5 dB steps (a gnuplot that records its script, then runs the real one).
if command -v gnuplot >/dev/null; then
  printf '#!/bin/sh\ntee "%s" | gnuplot "$@"\n' "$tmp/plot.gp" >"$tmp/gp.sh" && chmod +x "$tmp/gp.sh"
  if QVG_GNUPLOT="$tmp/gp.sh" "$qvg" compare $SHORT --methods rtn --plot "$tmp/p.png" --csv "$tmp/p.csv" \
    >/dev/null 2>"$tmp/err"; then
    python3 - "$tmp/plot.gp" "$tmp/p.csv" <<'PY' && ok || bad "compare --plot: the y range does not fit the data: $(grep yrange "$tmp/plot.gp")"
import csv, math, re, sys
lo, hi = map(float, re.search(r"set yrange \[([-\d.e+]+):([-\d.e+]+)\]", open(sys.argv[1]).read()).groups())
vals = [float(v) for row in csv.DictReader(open(sys.argv[2])) for k, v in row.items() if k not in ("frame", "clip_frame") and v not in ("", "inf")]
vals = [v for v in vals if math.isfinite(v)]
assert vals, "no finite PSNR"
assert lo == max(0.0, math.floor(min(vals) / 5) * 5 - 5), (lo, min(vals))
assert hi in (math.ceil(max(vals) / 5) * 5 + 5, math.ceil(max(vals) / 5) * 5 + 15), (hi, max(vals))
PY
  else
    bad "compare --plot failed: $(cat "$tmp/err")"
  fi
fi
expect_status1 "unknown method 'nosuch'" compare $SHORT --methods rtn nosuch
# Equal memory: at budget 2.5 every method that runs stores at most 2.575 bits
# (measured), each at its own family's configuration with the lowest expected
# error (the quality model of qvg/budget.h); KIVI's 32-token
# BF16 window cannot get there on 768-token spans (reported, not run).
if "$qvg" compare $SHORT --bits 2.5 --json >"$tmp/eq.json" 2>"$tmp/err"; then
  python3 - "$tmp/eq.json" <<'PY' && ok || bad "compare --bits 2.5: budget rule violated"
import json, sys
rows = {r["method"]: r for r in json.load(open(sys.argv[1]))}
assert set(rows) == {"bf16", "rtn", "kivi", "quarot", "qvg", "qvg-pro"}, rows.keys()
assert not rows["kivi"]["reachable"] and rows["kivi"]["span_bits"] > 2.575 and "psnr" not in rows["kivi"]
for m in ("rtn", "quarot", "qvg", "qvg-pro"):
    r = rows[m]
    assert r["reachable"] and r["budget"] == 2.5, r
    assert r["bits"] <= 2.5 * 1.03 and abs(r["bits"] - r["span_bits"]) < 1e-9, (m, r["bits"], r["span_bits"])
# The model's pick on 768-token spans (D = 128): B32 with the most FP8 centroids within 2.575 bits,
# 2 + 8/32 + 8/128 + 8 * 25 / 768 + 64 / (768 * 128) = 2.5747; QVG-Pro's family has it too (one stage).
# (" auto": the presets' centroids=auto, C = 25 on these spans)
assert rows["qvg"]["config"] == "INT2 B32 fp8 S1 C25 fp8c auto", rows["qvg"]["config"]
assert rows["qvg-pro"]["config"] == "INT2 B32 fp8 S1 C25 fp8c auto", rows["qvg-pro"]["config"]
PY
else
  bad "compare --bits 2.5 failed: $(cat "$tmp/err")"
fi
expect_status1 "numbers > 0" compare $SHORT --bits 0 --methods rtn
expect_status1 "got 'x'" compare $SHORT --bits 2.5 x --methods rtn
expect_status1 "--rd-bits needs --bits" compare $SHORT --bits none --rd-bits 3 --methods rtn
# The sweep over fewer frames (--rd-frames): its budgets' runs generate only those frames, and
# what it reports for them equals a run of just those frames (the runs are causal); the tables'
# runs are measured over as many. With a sink the spans' bits stay at the budget while the
# whole cache's are higher (the sink is BF16).
POLICY="--context $clip --start 192 --context-frames 6 --quant-factor 1 --methods rtn --sink 1 --window 1"
if "$qvg" compare $POLICY --frames 6 --bits 2.5 --rd-bits 5 --rd-frames 3 --json >"$tmp/rdf.json" 2>"$tmp/err" &&
  "$qvg" compare $POLICY --frames 3 --bits 5 --json >"$tmp/rd5.json" 2>>"$tmp/err"; then
  python3 - "$tmp/rdf.json" "$tmp/rd5.json" <<'PY' && ok || bad "compare --rd-frames: prefix property or bits violated"
import json, sys
rows = {(r["method"], r["budget"]): r for r in json.load(open(sys.argv[1]))}
short = {(r["method"], r["budget"]): r for r in json.load(open(sys.argv[2]))}
main, swept = rows[("rtn", 2.5)], rows[("rtn", 5.0)]
assert main["chunks"] == 2 and swept["chunks"] == 1 and rows[("bf16", None)]["chunks"] == 2, (main, swept)
assert main["rd_chunks"] == 1 and main["rd_psnr"] == main["psnr_per_chunk"][0], main
assert swept["rd_psnr"] == short[("rtn", 5.0)]["psnr"] and swept["rd_bits"] == short[("rtn", 5.0)]["span_bits_measured"]
assert swept["rd_bits"] > 4 and main["rd_psnr"] < swept["rd_psnr"], (main, swept)
assert main["span_bits_measured"] <= 2.5 * 1.03 and main["bits"] > 4, main  # the BF16 sink chunk counts in the cache
PY
else
  bad "compare --rd-frames failed: $(cat "$tmp/err")"
fi
# Spans of 2 chunks with a window of 2: a span stays until both its chunks have left the window,
# so at the end every cache holds a chunk the model no longer attends to, BF16's too; the ratio
# column (against a BF16 copy of the attended tokens) is then below 1 for BF16, and the table says why.
if "$qvg" compare --context "$clip" --start 192 --context-frames 6 --quant-factor 2 --methods rtn --sink 1 --window 2 \
  --frames 12 --bits 2.5 >"$tmp/ratio.txt" 2>"$tmp/err"; then
  grep -qE "^bf16 +BF16 +16\.000 +16\.000 +0\.[0-9]+x" "$tmp/ratio.txt" &&
    grep -q "^ratio: against a BF16 copy of the tokens the model attends to; .*(the BF16 cache 0\.[0-9]*x)" "$tmp/ratio.txt" &&
    ok || bad "compare: BF16 ratio below 1 without its note: $(cat "$tmp/ratio.txt")"
else
  bad "compare with spans outliving the window failed: $(cat "$tmp/err")"
fi
expect_status1 "--rd-frames 9 is more than the 3 generated frames" compare $SHORT --methods rtn --rd-bits 3 --rd-frames 9
# --bits none: the specs as given.
"$qvg" compare $SHORT --bits none --methods qvg:centroids=8 >"$tmp/none.txt" 2>"$tmp/err" &&
  grep -q "as given" "$tmp/none.txt" && grep -q "^qvg:centroids=8 .*C8 " "$tmp/none.txt" && ok || bad "--bits none: $(cat "$tmp/none.txt" "$tmp/err")"
# The demo's quick run: the table, its progress with time left, and its files.
if "$qvg" demo --quick --out "$tmp/demo" >"$tmp/demo.txt" 2>"$tmp/err"; then
  grep -q "^rtn .*INT2 B16" "$tmp/demo.txt" && grep -q "^bf16 .* inf " "$tmp/demo.txt" && ok || bad "demo table: $(cat "$tmp/demo.txt")"
  grep -q "^kivi *cannot reach 2.5 bits" "$tmp/demo.txt" && ok || bad "demo: kivi not reported unreachable"
  # The ranking line: the best method and its margins, over the next and (where QVG methods are
  # first and second) over the best baseline, equal to the table's PSNR differences.
  python3 - "$tmp/demo.txt" <<'PY' && ok || bad "demo: the best line does not match the table: $(cat "$tmp/demo.txt")"
import re, sys
text = open(sys.argv[1]).read().split("\nrate-distortion")[0]
psnr = {m.group(1): float(m.group(2)) for m in re.finditer(
    r"^(\S+) .* \d+\.\d{3} +\d+\.\d{3} +\d+\.\d+x +(\d+\.\d+) ", text, re.M)}
assert {"rtn", "quarot", "qvg", "qvg-pro"} <= set(psnr), psnr
order = sorted(psnr, key=psnr.get, reverse=True)
line = re.search(r"^best: (\S+), ([\d.]+) dB at [\d.]+ bits, ([\d.]+) dB above the next, (\S+) \(.*$", text, re.M)
assert line and line.group(1) == order[0] and line.group(4) == order[1], (line and line.group(0), order)
assert abs(float(line.group(3)) - (psnr[order[0]] - psnr[order[1]])) < 0.011, line.group(0)
base = re.search(r"and ([\d.]+) dB above the best baseline, (\S+) \(", line.group(0))
qvg = {m for m in psnr if m.startswith("qvg")}  # the presets and the codebook code (qvg:code=cq)
assert "qvg:code=cq" in psnr, psnr
if order[0] in qvg and order[1] in qvg:
    best_base = max(("rtn", "quarot"), key=psnr.get)
    assert base and base.group(2) == best_base, line.group(0)
    assert abs(float(base.group(1)) - (psnr[order[0]] - psnr[best_base])) < 0.011, line.group(0)
else:
    assert not base, line.group(0)
PY
  grep -q "left$" "$tmp/err" && ok || bad "demo progress has no time left: $(cat "$tmp/err")"
  for f in psnr_per_frame.csv rate_distortion.csv side_by_side.mp4 psnr_per_frame.png drift.csv kv_bytes.png \
    psnr_vs_real.png; do
    [ -s "$tmp/demo/$f" ] && ok || bad "demo wrote no $f"
  done
  grep -q "wrote $tmp/demo/side_by_side.mp4" "$tmp/demo.txt" && ok || bad "demo does not say where the video is"
else
  bad "demo --quick failed: $(cat "$tmp/err")"
fi

# dump-kv: 6 layers x {q, k_pre, k, v} [768, 2, 128], read back by qvg eval.
if "$qvg" dump-kv --context "$clip" --start 192 --context-frames 3 -o "$tmp/kv.safetensors" >/dev/null 2>"$tmp/err"; then
  "$qvg" eval --k "$tmp/kv.safetensors" --k-name layer5.k_pre --v "$tmp/kv.safetensors" --v-name layer5.v \
    --q "$tmp/kv.safetensors" --q-name layer0.q --layout thd --methods rtn --json --quiet >"$tmp/ev.json" 2>"$tmp/err" &&
    grep -q '"attn_rel_l2"' "$tmp/ev.json" && ok || bad "dump-kv output does not read back: $(cat "$tmp/err")"
  expect_status1 "layer6.k" eval --k "$tmp/kv.safetensors" --k-name layer6.k --v "$tmp/kv.safetensors" \
    --v-name layer0.v --layout thd --methods rtn
else
  bad "dump-kv failed: $(cat "$tmp/err")"
fi

# Bad inputs: a message naming the problem, exit status 1.
expect_status1 "no such file" generate --context "$tmp/missing.mp4" --frames 3 -o "$tmp/x.mp4"
expect_status1 "multiple of 3" generate --context "$clip" --context-frames 4 --frames 3 -o "$tmp/x.mp4"
expect_status1 "has 240 frames, need 1006" generate --context "$clip" --start 1000 --frames 3 -o "$tmp/x.mp4"
expect_status1 "unknown method 'nosuch'" generate $SHORT --cache nosuch -o "$tmp/x.mp4"
# --device cuda: without a CUDA build or a device, a message naming CUDA and status 1;
# with one (e.g. a GPU machine with FFmpeg), the same run succeeds.
if "$qvg" generate $SHORT --cache qvg --device cuda -o "$tmp/gpu.mp4" >"$tmp/out" 2>"$tmp/err"; then
  [ -s "$tmp/gpu.mp4" ] && ok || bad "generate --device cuda wrote no file"
else
  rc=$?
  if [ $rc -eq 1 ] && grep -qi "cuda" "$tmp/err"; then ok; else bad "generate --device cuda: exit $rc: $(cat "$tmp/err")"; fi
fi
head -c 1000000 "$src/models/qvg_ref_video_dit.safetensors" >"$tmp/cut.safetensors"
expect_status1 "cut.safetensors" generate $SHORT --model "$tmp/cut.safetensors" -o "$tmp/x.mp4"
expect_status1 "multiple of 3" dump-kv --context "$clip" --context-frames 5 -o "$tmp/x.safetensors"
expect_status1 "no such file" compare --context "$tmp/missing.mp4" --frames 3 --methods rtn

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
