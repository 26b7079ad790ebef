#!/usr/bin/env bash
# Writes REPORT.md and the PNG plots of one loadtest/run.sh results directory from its runs.tsv
# and params.env (run.sh calls it; it can be re-run by hand on old results).
# Usage: loadtest/report.sh RESULTS_DIR [full|quick]
# Plots need gnuplot (Debian: gnuplot-nox, in scripts/deps.sh); without it the report says so.
set -euo pipefail

res=${1:?usage: report.sh RESULTS_DIR [full|quick]}
mode=${2:-full}
tsv=$res/runs.tsv
[ -s "$tsv" ] || { echo "report.sh: no $tsv" >&2; exit 1; }
params=""
[ -f "$res/params.env" ] && params=$(cat "$res/params.env")
param() { sed -n "s/^$1=//p" <<<"$params" | head -1; }
seg_ref=$(param strategy_segments); seg_ref=${seg_ref:-16}

# --- plots ------------------------------------------------------------------------------------
# value ID COLUMN: one cell of runs.tsv ("" when the run is missing).
value() {
  awk -F'\t' -v id="$1" -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $1 == id { print $c[col]; exit }' "$tsv"
}
first_run() { local id; for id in "$@"; do [ -n "$(value "$id" rate)" ] && { echo "$id"; return; }; done; echo ""; }
seg_h0=$(first_run "a-seg$seg_ref-h0" b-segmented-h0)
seg_h2=$(first_run "a-seg$seg_ref-h2" b-segmented-h2)

awk -F'\t' 'NR > 1 && $2 == "a" { r[$5, $6] = $10; s[$5] = 1; h[$6] = 1 }
  END {
    n = 0; for (x in s) seg[++n] = x + 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (seg[j] < seg[i]) { t = seg[i]; seg[i] = seg[j]; seg[j] = t }
    print "# segments rate_hold0 rate_hold2 ideal_hold2"
    base = r[1, 2]
    for (i = 1; i <= n; i++) {
      x = seg[i]
      printf "%d %s %s %s\n", x, ((x, 0) in r ? r[x, 0] : "NaN"), ((x, 2) in r ? r[x, 2] : "NaN"), (base != "" ? base * x : "NaN")
    }
  }' "$tsv" >"$res/sweep.dat"
{
  echo "# strategy hold p50 p90 p99 p999 (ms)"
  for h in 0 2; do
    for st in segmented single-lock atomic; do
      if [ "$st" = segmented ]; then id=$([ "$h" = 0 ] && echo "$seg_h0" || echo "$seg_h2"); else id=b-$st-h$h; fi
      [ -n "$id" ] && [ -n "$(value "$id" p50_ms)" ] || continue
      echo "\"$st h$h\" $h $(value "$id" p50_ms) $(value "$id" p90_ms) $(value "$id" p99_ms) $(value "$id" p999_ms)"
    done
  done
} >"$res/latency.dat"

plots=""
if command -v gnuplot >/dev/null 2>&1; then
  term="pngcairo size 900,520 font 'DejaVu Sans,10'"
  echo 'set terminal' | gnuplot 2>&1 | grep -q pngcairo || term="png size 900,520"
  # y up to 1.5 × the best measured point: the ideal line is clipped, not the data
  ymax=$(awk '!/^#/ { for (i = 2; i <= 3; i++) if ($i != "NaN" && $i + 0 > m) m = $i + 0 } END { print int(m * 1.5) + 1 }' "$res/sweep.dat")
  if [ "$(grep -vc '^#' "$res/sweep.dat")" -gt 0 ]; then
    gnuplot <<EOF 2>>"$res/logs/gnuplot.log" && plots+=" orders_vs_segments.png"
set terminal $term
set output '$res/orders_vs_segments.png'
set title "inventoryd segmented strategy: orders/s vs segments ($(param instances) instances behind nginx, wrk -c$(param conns))"
set logscale x 2
set xlabel 'segments'
set ylabel 'orders/s (201 answers)'
set grid
set key top left
set yrange [0:$ymax]
plot '$res/sweep.dat' using 1:2 with linespoints lw 2 pt 7 title 'hold 0 ms', \
     '' using 1:3 with linespoints lw 2 pt 5 title 'hold 2 ms', \
     '' using 1:4 with lines dt 2 lc rgb '#888888' title 'hold 2 ms, ideal N x (1 segment)'
EOF
  fi
  if [ "$(grep -vc '^#' "$res/latency.dat")" -gt 0 ]; then
    gnuplot <<EOF 2>>"$res/logs/gnuplot.log" && plots+=" latency_by_strategy.png"
set terminal $term
set output '$res/latency_by_strategy.png'
set title "latency percentiles by strategy ($seg_ref segments; wrk --latency)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel 'latency (ms, log scale)'
set grid ytics
set key top left
set xtics nomirror
plot '$res/latency.dat' using 3:xtic(1) title 'p50', '' using 4 title 'p90', '' using 5 title 'p99', '' using 6 title 'p99.9'
EOF
  fi
fi

# --- the one-screen summary: SPEC §9 ratios with verdicts, invariants, plots ------------------
ratios_table() {
  echo "| ratio | measured | target | verdict | from runs |"
  echo "|---|---|---|---|---|"
  ratio_row() { # name num_id den_id target op(ge|le) [column]
    local name=$1 a=$2 b=$3 target=$4 op=$5 col=${6:-rate} va vb
    va=$( [ -n "$a" ] && value "$a" "$col" || true); vb=$( [ -n "$b" ] && value "$b" "$col" || true)
    if [ -z "$va" ] || [ -z "$vb" ] || [ "$vb" = "-" ] || [ "$va" = "-" ]; then
      echo "| $name | not measured | $target | — | ${a:-?} / ${b:-?} |"; return
    fi
    awk -v n="$name" -v a="$va" -v b="$vb" -v t="$target" -v op="$op" -v ia="$a" -v ib="$b" 'BEGIN {
      r = (b > 0) ? a / b : 0
      ok = (op == "ge") ? (r >= t) : (r <= t)
      printf "| %s | %.2f× (%s / %s) | ≥ %s× | %s | %s / %s |\n", n, r, a, b, t, ok ? "meets" : "falls short", ia, ib }'
  }
  ratio_row "segments 16 vs 1, hold 2 ms" a-seg16-h2 a-seg1-h2 14 ge
  ratio_row "segmented vs atomic, hold 0" "$seg_h0" "$(first_run b-atomic-h0)" 0.7 ge
  ratio_row "atomic vs bare libmicrohttpd handler" "$(first_run b-atomic-h0)" "$(first_run e-bare)" 0.5 ge
  ratio_row "409 flood after sell-out vs bare handler" "$(first_run c-flood409)" "$(first_run e-bare)" 0.8 ge
  top=$( [ -n "$seg_h0" ] && value "$seg_h0" top_per_order || true)
  mon=$(value m-segmented mon_client_per_order)
  if [ -n "$top" ] && [ "$top" != "-" ]; then
    awk -v t="$top" -v m="${mon:--}" -v id="$seg_h0" 'BEGIN {
      printf "| Redis commands per successful order (segmented, hold 0) | %.2f sent by clients (commandstats)%s | ≤ 2.2 | %s | %s |\n",
        t, (m != "-" ? sprintf("; %.2f by MONITOR", m) : ""), (t <= 2.2 ? "meets" : "falls short"), id }'
  else
    echo "| Redis commands per successful order | not measured | ≤ 2.2 | — | |"
  fi
  rss=$(value f-rss256 rss_max_kib)
  if [ -n "$rss" ]; then
    awk -v r="$rss" -v c="$(value f-rss256 conns)" 'BEGIN {
      printf "| peak RSS of one instance under %s connections | %.1f MiB | ≤ 32 MiB | %s | f-rss256 |\n", c, r / 1024, (r <= 32768 ? "meets" : "falls short") }'
  else
    echo "| peak RSS under 256 connections | not measured | ≤ 32 MiB | — | |"
  fi

}
ratios=$(ratios_table)
n_meet=$(grep -c '| meets |' <<<"$ratios" || true)
n_short=$(grep -c '| falls short |' <<<"$ratios" || true)
n_runs=$(($(wc -l <"$tsv") - 1))
n_bad=$(awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["verify"] ~ /✗/ || $c["live"] ~ /✗/ { n++ } END { print n + 0 }' "$tsv")

# --- REPORT.md --------------------------------------------------------------------------------
git_rev=$(param git_rev) # recorded by run.sh when it built; HEAD now may be another commit
[ -n "$git_rev" ] || git_rev="unknown (not recorded)"
[ -z "$(param inventoryd_args)" ] || git_rev+="; extra flags: $(param inventoryd_args)"
{
  echo "# inventoryd load test — $(basename "$res") ($mode)"
  echo
  echo "## Summary"
  echo
  if [ "$n_bad" = 0 ]; then
    echo "**Invariants (SPEC §8): all $n_runs runs passed.** SPEC §9: **$n_meet** ratio(s) meet their target, **$n_short** fall short."
  else
    echo "**Invariants (SPEC §8): $n_bad of $n_runs runs VIOLATED them** (see below and \`raw/*.verify.txt\`). SPEC §9: **$n_meet** ratio(s) meet their target, **$n_short** fall short."
  fi
  echo
  echo "$ratios"
  echo
  echo "Ratios are printed, never asserted: the run fails only on an invariant violation or an"
  echo "infrastructure failure. Details of every run below the plots."
  echo
  case " $plots " in *" orders_vs_segments.png "*) echo "![orders/s vs segments](orders_vs_segments.png)" ;; esac
  case " $plots " in *" latency_by_strategy.png "*) echo "![latency by strategy](latency_by_strategy.png)" ;; esac
  [ -n "$plots" ] && echo
  echo "## Set-up"
  echo
  echo "Produced by \`loadtest/run.sh$([ "$mode" = quick ] && echo ' --quick')\`. Machine: $(getconf _NPROCESSORS_ONLN) CPUs"\
       "($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), $(uname -sr)."
  echo "Software: $(redis-server --version | awk '{print $1, $2, $3}'), $(nginx -v 2>&1 | sed 's/.*: //'),"\
       "wrk $(dpkg-query -W -f='${Version}' wrk 2>/dev/null || echo '?'), libmicrohttpd $(pkg-config --modversion libmicrohttpd 2>/dev/null || echo '?'); inventoryd at $git_rev."
  echo
  echo "Set-up: wrk ($(param wrk_threads) threads, $(param conns) connections unless noted) → nginx (1 worker, upstream"\
       "keep-alive 64) → $(param instances) inventoryd instances → one redis-server; all on this machine."\
       "Each run: a fresh SKU ($(param stock) units unless noted), fresh instances and nginx,"\
       "a $(param warmup) s warm-up run, then a $(param window) s measured window. \`--threads\` $(param threads_h0) per instance at hold 0,"\
       "$(param threads_h2) at hold > 0; \`--lock-wait-ms $(param lock_wait)\`; quantity $(param qty) per order."
  echo
  cat <<'EOF'
Columns: **ok/s** = answers of the run's success status (201 for orders, 409 for the flood, 2xx
for ceilings) inside the window ÷ window; **p50…p99.9** from wrk's latency histogram (ms);
**201/409/503/other** answer counts (other = any other status), **sock** = wrk socket errors;
**inv.** = invariants: live snapshot mid-window / full check after the run (✓ pass, ✗ violated,
— not applicable); **cmds/order** = Redis commands per 201 from `INFO commandstats` deltas:
*top* = commands sent by clients (EVAL/EVALSHA/FCALL families plus connection-level commands),
*all* = every command including those executed inside scripts; **RSS** = peak VmHWM of the
instances (KiB, largest of them); **CPU µs/op** = CPU time per successful answer in the window,
split inventoryd (all instances) / redis / nginx / wrk / rest (kernel work not charged to a
process, and any other process on the machine), from /proc; **busy / others** = machine CPU
utilisation during the window, and the part of it that is "rest" (work outside the benchmark's
processes: well above a few % means a build or test competed for the 2 cores; such runs are
measured again once, see `LT_RETRIES`), and (before) the utilisation during 0.5 s just before
the run while the servers idled.
EOF
  echo
  scen_title() {
    case $1 in
      a) echo "(a) segment sweep, strategy segmented" ;;
      b) echo "(b) strategies: segmented vs single-lock vs atomic" ;;
      c) echo "(c) sell-out, then a flood of 409s" ;;
      d) echo "(d) mixed: 90 % orders, 10 % status reads" ;;
      e) echo "(e) ceilings" ;;
      f) echo "(f) memory under many connections" ;;
      m) echo "(m) MONITOR calibration (commands per order, client vs script)" ;;
      p) echo "(p) profiled run" ;;
    esac
  }
  for sc in a b c d e f m p; do
    awk -F'\t' -v s="$sc" 'NR > 1 && $2 == s { f = 1 } END { exit !f }' "$tsv" || continue
    echo "## $(scen_title "$sc")"
    echo
    echo "| run | what | ok/s | p50 | p90 | p99 | p99.9 | 201 | 409 | 503 | other | sock | inv. | cmds/order top / all | RSS KiB | CPU µs/op inv/redis/nginx/wrk/rest | busy / others (before) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    awk -F'\t' -v s="$sc" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      $2 == s {
        printf "| %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s / %s / %s / %s / %s | %s%% / %s%% (%s%%) |\n",
          $c["id"], $c["label"], ($c["conns"] != "" ? ", c" $c["conns"] : ""), $c["rate"],
          $c["p50_ms"], $c["p90_ms"], $c["p99_ms"], $c["p999_ms"], $c["created"], $c["s409"], $c["s503"],
          $c["other"], $c["sock_err"], $c["live"], $c["verify"], $c["top_per_order"], $c["all_per_order"],
          $c["rss_max_kib"], $c["cpu_inv_us"], $c["cpu_redis_us"], $c["cpu_nginx_us"], $c["cpu_wrk_us"], $c["cpu_rest_us"], $c["busy_pct"], $c["others_pct"], $c["bg_pct"]
      }' "$tsv"
    echo
    if [ "$sc" = a ]; then
      echo "Orders/s by segments:"
      echo
      echo "| segments | hold 0 | hold 2 | hold 2 vs 1 segment |"
      echo "|---|---|---|---|"
      awk 'NR > 1 { printf "| %s | %s | %s | %s |\n", $1, $2, $3, ($3 != "NaN" && b > 0 ? sprintf("%.2f×", $3 / b) : "") }' b="$(awk 'NR == 2 { print $3 }' "$res/sweep.dat")" "$res/sweep.dat"
      echo
      case " $plots " in *" orders_vs_segments.png "*) echo "![orders/s vs segments](orders_vs_segments.png)"; echo ;; esac
    fi
    if [ "$sc" = b ]; then
      case " $plots " in *" latency_by_strategy.png "*) echo "![latency by strategy](latency_by_strategy.png)"; echo ;; esac
    fi
    if [ "$sc" = m ]; then
      echo "Commands seen by MONITOR per 201 (a MONITOR slows Redis down, so these runs are not throughput figures):"
      echo
      echo "| run | source | command | per order |"
      echo "|---|---|---|---|"
      for f in "$res"/raw/m-*.monitor.summary; do
        [ -f "$f" ] || continue
        id=$(basename "$f" .monitor.summary)
        awk -v id="$id" -v created="$(value "$id" created)" '{ printf "| %s | %s | %s | %.3f |\n", id, $1, $2, (created > 0 ? $3 / created : 0) }' "$f"
      done
      echo
    fi
    if [ "$sc" = p ]; then
      for st in segmented atomic; do
        for f in by-process syscalls inventoryd-dso inventoryd-self inventoryd-inclusive; do
          [ -s "$res/profile-$st-$f.txt" ] || continue
          case $f in
            by-process) echo "**$st** — CPU samples by thread name, whole machine (\`perf record -a -F 499\`; inventoryd's threads are MHD-worker):" ;;
            syscalls) echo "**$st** — system calls and context switches per successful order (\`perf stat -e raw_syscalls:sys_enter,context-switches\`):" ;;
            inventoryd-dso) echo "**$st** — inventoryd (all instances, % of their samples) by binary:" ;;
            inventoryd-self) echo "**$st** — inventoryd top functions, self time (user and kernel, % of inventoryd's samples):" ;;
            inventoryd-inclusive) echo "**$st** — inventoryd user-space functions including callees (\`perf record --call-graph dwarf\` on the instances; children / self % of their samples):" ;;
          esac
          echo
          echo '```'
          cat "$res/profile-$st-$f.txt"
          echo '```'
          echo
        done
      done
    fi
  done
  [ -n "$plots" ] || echo "_No plots: gnuplot is not installed (apt-get install gnuplot-nox)._"
  echo
  echo "Raw wrk output, verifier output and Redis commandstats of each run: \`raw/\`; all numbers: \`runs.tsv\`."
} >"$res/REPORT.md"

# The ratios on the terminal too.
grep '^|' <<<"$ratios" | tail -n +3 \
  | awk -F'|' '{ gsub(/^ +| +$/, "", $2); gsub(/^ +| +$/, "", $3); gsub(/^ +| +$/, "", $5); printf "  %-50s %-40s %s\n", $2, $3, $5 }' >&2
