#!/bin/bash
# EXPERIMENT, not part of cargo-ekstazi: at each listed commit's parent,
# record every test's basic blocks (and those of the programs it runs) with
# the experimental build of experiment.patch, map them to source lines
# (line-coverage.rs; dependencies' lines too, diffed between versions by
# dependency-diff.sh), then run that build's selection at the commit itself,
# every changed function named in its report. bound.py reads the result.
#
#   run.sh <repo git dir> <out dir> <experimental cargo-ekstazi> <line-coverage> <commits file> -- <cargo test options>
#
# <commits file>: lines "<n> <commit> <parent>", oldest first (the parent is
# the commit the replay compared against: its previous built commit).
# (minijinja's runs were made without --no-doc and TMPDIR; bound.py leaves
# doctests out, so the figures are the same.)
set -u
REPO=$1 OUT=$(realpath "$2") E=$3 B=$4 COMMITS=$5
shift 6
HERE=$(dirname "$(realpath "$0")")
REG=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/index.crates.io-* | head -1)
WT=$OUT/worktree
mkdir -p "$OUT"/{blk,diffs,touched,logs,reports,tmp}
[ -d "$WT" ] || git --git-dir="$REPO" worktree add --detach "$WT" HEAD >/dev/null
while read -r _ c p; do
  [ -s "$OUT/reports/$c.json" ] && continue
  echo "=== $(date +%H:%M:%S) $c (parent $p)"
  # The commit's dependencies are fetched first, for their sources' diff.
  git -C "$WT" checkout -q --detach "$c" && git -C "$WT" clean -fdxq -e target && (cd "$WT" && cargo fetch -q)
  git -C "$WT" checkout -q --detach "$p"
  rm -rf "$OUT/blk/$c" "$OUT/tmp" && mkdir -p "$OUT/blk/$c" "$OUT/tmp"
  (cd "$WT" && TMPDIR="$OUT/tmp" EKSTAZI_EXP_BLOCKS="$OUT/blk/$c" "$E" ekstazi test --forceall --no-doc "$@") \
    > "$OUT/logs/$c-parent.log" 2>&1 || echo "parent run failed: $?"
  { git --git-dir="$REPO" diff -U0 "$p" "$c"; "$HERE/dependency-diff.sh" "$REPO" "$p" "$c" "$REG"; } \
    > "$OUT/diffs/$c.diff" 2> "$OUT/diffs/$c.skipped"
  BLOCKS_V2=1 REGISTRY_SRC="$REG" "$B" "$OUT/blk/$c" "$WT" "$OUT/diffs/$c.diff" \
    > "$OUT/touched/$c.jsonl" 2> "$OUT/touched/$c.err"
  rm -rf "$OUT/blk/$c"
  git -C "$WT" checkout -q --detach "$c"
  rm -rf "$OUT/tmp" && mkdir -p "$OUT/tmp"
  (cd "$WT" && TMPDIR="$OUT/tmp" "$E" ekstazi test --no-doc "$@" --report-json "$OUT/reports/$c.json") \
    > "$OUT/logs/$c.log" 2>&1 || echo "run failed: $?"
done < "$COMMITS"
