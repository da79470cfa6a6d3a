# Sourced by the acceptance scripts. Needs DB, OUTDIR and res set.
# prof NAME ARGS...: `profkit run ARGS --name NAME`, timed; its output in $OUTDIR/NAME.txt, its
# first lines and a JSON summary line in $res.
prof() {
  local n=$1; shift
  local t0=$(date +%s%N)
  profkit run "$@" --name "$n" --db "$DB" >"$OUTDIR/$n.txt" 2>&1; local rc=$?
  local t1=$(date +%s%N)
  echo "profkit run $* -> rc=$rc, wall $(( (t1 - t0) / 1000000 )) ms" | tee -a "$res"
  head -4 "$OUTDIR/$n.txt" >>"$res"
  profkit summary "$n" -f json --db "$DB" >"$OUTDIR/$n.summary.json" 2>>"$res"
  python3 -c "import json;s=json.load(open('$OUTDIR/$n.summary.json'));print('  kernels',s['kernels'],'gpu_time_ns',s['gpu_time_ns'],'tc_pct',s['tensor_core_time_pct'],'by_prec',s['time_by_precision_ns'],'layout_ns',s['time_by_family_ns'].get('layout'))" >>"$res" 2>&1
}
