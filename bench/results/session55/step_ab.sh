# Sourced by session 55's staged calls. step_ab PRESET TAG LIMIT [ARGS...] runs
# `mhar bench step` for the baseline and mhar-block with its running sums formed in the
# output projections ("mhar-block", the default) and by the separate add
# ("mhar-block+stream.sum_in_product=false") in one process, 30 timed steps, graphed;
# ORDER=off puts the separate add first. Writes step_PRESET_TAG.{md,json,log} under $R
# and prints its table rows.
step_ab() {
  local p=$1 tag=$2 lim=$3; shift 3
  local on=mhar-block off=mhar-block+stream.sum_in_product=false
  local methods=baseline,$on,$off
  if [ "${ORDER:-on}" = off ]; then methods=baseline,$off,$on; fi
  timeout $lim python3 -m mhar bench step --preset paper-$p --methods $methods \
    --steps 30 --warmup 3 --out $R --tag ${p}_$tag "$@" > $R/step_${p}_$tag.log 2>&1
  echo "rc=$? $p $tag at ${SECONDS}s"; grep -h "| paper" $R/step_${p}_$tag.md | grep -v "| >=\|| <=" | sort -u
  rm -f $R/*.png; pack
}
