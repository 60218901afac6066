#!/usr/bin/env bash
# Session 57: whichever card comes. On an H200, session 57's 100M/350M sum-in-product A/B
# (the issue's card; session 56 ran it on an H100 only); on anything else, session 55's
# staged 1B A/B (sequential, which fits an H100).
# run: C=<commit> OUT=$OUT bash bench/results/session57/any_card/call.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/results/session57/1_sum_in_product_ab/call.sh
fi
exec bash bench/results/session55/next_2_sum_in_product_1b/call.sh
