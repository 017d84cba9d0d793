#!/bin/bash
# EXPERIMENT, not part of cargo-ekstazi: the source diff of every dependency
# whose version a commit changes, between the two versions' registry directories.
#   dependency-diff.sh <repo git dir> <parent> <commit> <registry src dir>
REPO=$1 P=$2 C=$3 REG=$4
versions() { git --git-dir="$REPO" show "$1:Cargo.lock" | awk '/^name = /{n=$3} /^version = /{print n" "$3}' | tr -d '"' | sort -u; }
join <(versions $P | awk '{print $1"@"$2}' | sort) <(versions $C | awk '{print $1"@"$2}' | sort) -v1 | while IFS=@ read -r name old; do
  new=$(versions $C | awk -v n="$name" '$1==n{print $2}' | sort -V | tail -1)
  [ -n "$new" ] && [ -d "$REG/$name-$old" ] && [ -d "$REG/$name-$new" ] || { echo "skip $name $old -> $new" >&2; continue; }
  (cd "$REG" && git diff --no-index -U0 "$name-$old" "$name-$new")
done
