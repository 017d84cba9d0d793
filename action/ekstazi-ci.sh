#!/usr/bin/env bash
# The logic of the cargo-ekstazi GitHub Action (action.yml at the
# repository root). The action leaves only the cache steps to GitHub
# (actions/cache/restore and actions/cache/save); everything else is here,
# so that it can be tested by running it with the GitHub environment set
# (tests/e2e/github_action.rs).
#
#   ekstazi-ci.sh keys     the cache keys, for push, pull_request, merge_group
#   ekstazi-ci.sh install  install cargo-ekstazi (unless it is on PATH)
#   ekstazi-ci.sh stash    put the first restored state aside
#   ekstazi-ci.sh run      combine the restored states, run the tests,
#                          write the job summary
#
# Two states are restored, one after the other, into the same directory
# (a cache entry restores only to the path it was saved from):
#   first:  this branch's own state (for a pull request, its own earlier runs')
#   second: the base branch's (the default branch's, for a push elsewhere)
# and combined with `cargo ekstazi merge-state`: per test the newest
# record, per commit every filed record, so that at a pull request's merge
# commit the records of both parents vouch.
#
# Inputs come as INPUT_* variables (see action.yml); outputs go to
# $GITHUB_OUTPUT, the summary to $GITHUB_STEP_SUMMARY.
set -euo pipefail

die() {
    printf '::error::cargo-ekstazi action: %s\n' "$*" >&2
    exit 2
}

warn() {
    printf '::warning::cargo-ekstazi action: %s\n' "$*" >&2
}

# `name=value` to $GITHUB_OUTPUT; a value with new lines as a heredoc.
output() {
    local name=$1 value=$2
    if [[ $value == *$'\n'* ]]; then
        local delimiter="EKSTAZI_EOF_$RANDOM$RANDOM"
        printf '%s<<%s\n%s\n%s\n' "$name" "$delimiter" "$value" "$delimiter" >>"$GITHUB_OUTPUT"
    else
        printf '%s=%s\n' "$name" "$value" >>"$GITHUB_OUTPUT"
    fi
}

# A branch or other name as a piece of a cache key: keys may not hold a
# comma, and `:` (which no git ref holds) ends the piece, so that one
# branch's prefix never matches another branch's keys.
key_piece() {
    local piece=${1//,/_}
    printf '%s' "${piece//:/_}"
}

# A field of the event's JSON payload, or nothing.
event_field() {
    local path=${GITHUB_EVENT_PATH:-}
    if [[ -n $path && -f $path ]] && command -v jq >/dev/null 2>&1; then
        jq -r "$1 // empty" "$path" 2>/dev/null || true
    fi
}

positive_integer() {
    [[ $1 =~ ^[1-9][0-9]*$ ]]
}

# The shard, from INPUT_SHARDS and INPUT_SHARD; sets `shards` and `shard`.
read_shard() {
    shards=${INPUT_SHARDS:-1}
    shard=${INPUT_SHARD:-1}
    positive_integer "$shards" || die "shards must be a positive number, not '$shards'"
    positive_integer "$shard" || die "shard must be a positive number, not '$shard'"
    ((shard <= shards)) || die "shard $shard is not one of 1 to $shards"
}

scratch() {
    : "${RUNNER_TEMP:?RUNNER_TEMP is not set}"
    printf '%s/ekstazi-action' "$RUNNER_TEMP"
}

# The state directory, relative to the working directory: the cache saves
# and restores exactly this path (its version depends on the path).
STATE_DIR=.ekstazi

# Whether this event's run records (and so saves) its state: pushes do;
# pull requests and merge queues only with `record-pull-requests: true`.
records_pull_requests() {
    [[ ${INPUT_RECORD_PULL_REQUESTS:-false} == true ]]
}

run_records() {
    case ${GITHUB_EVENT_NAME:-push} in
        pull_request | pull_request_target | merge_group) records_pull_requests ;;
        *) true ;;
    esac
}

keys() {
    : "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
    : "${GITHUB_SHA:?GITHUB_SHA is not set}"
    local event=${GITHUB_EVENT_NAME:-push} ref=${GITHUB_REF:-}
    read_shard
    local default_branch=${INPUT_DEFAULT_BRANCH:-}
    [[ -n $default_branch ]] || default_branch=$(event_field .repository.default_branch)
    [[ -n $default_branch ]] || default_branch=main

    local part=all
    ((shards == 1)) || part="shard${shard}of${shards}"
    local extra
    extra=$(key_piece "${INPUT_CACHE_KEY:-}")
    local namespace="cargo-ekstazi-${RUNNER_OS:-local}${extra:+-$extra}-$part-"

    # first: this run's own state; second: the state of the branch it
    # builds on. `save`: whether this run's state is worth keeping.
    local first="" second="" save=true
    case $event in
        pull_request | pull_request_target)
            local number
            number=$(event_field '.pull_request.number // .number')
            if [[ -z $number && $ref =~ ^refs/pull/([0-9]+)/ ]]; then
                number=${BASH_REMATCH[1]}
            fi
            [[ -n $number ]] || die "no pull request number in GITHUB_EVENT_PATH or GITHUB_REF ($ref)"
            local base=${GITHUB_BASE_REF:-}
            [[ -n $base ]] || base=$(event_field .pull_request.base.ref)
            [[ -n $base ]] || die "GITHUB_BASE_REF is not set"
            second="branch:$(key_piece "$base"):"
            if records_pull_requests; then
                first="pr:$number:"
            else
                # Its records nobody keeps: it selects on its base's state,
                # runs as `cargo test` does (--no-record) and saves nothing.
                save=false
            fi
            ;;
        merge_group)
            # The queue's branch is new for every entry: only the base
            # branch's state helps, and a state saved here would never be
            # restored (a cache saved on this ref is seen by this ref only).
            local base
            base=$(event_field .merge_group.base_ref)
            base=${base#refs/heads/}
            if [[ -z $base && $ref =~ ^refs/heads/gh-readonly-queue/(.+)/pr-[0-9]+-[0-9a-f]+$ ]]; then
                base=${BASH_REMATCH[1]}
            fi
            [[ -n $base ]] || die "no base branch in GITHUB_EVENT_PATH (merge_group.base_ref) or GITHUB_REF ($ref)"
            second="branch:$(key_piece "$base"):"
            save=false
            ;;
        *)
            # push, schedule, workflow_dispatch, ...: a branch or a tag.
            case $ref in
                refs/heads/*) first="branch:$(key_piece "${ref#refs/heads/}"):" ;;
                refs/tags/*) first="tag:$(key_piece "${ref#refs/tags/}"):" ;;
                *) die "GITHUB_REF '$ref' names neither a branch nor a tag" ;;
            esac
            local default
            default="branch:$(key_piece "$default_branch"):"
            [[ $first == "$default" ]] || second=$default
            ;;
    esac

    local sha=$GITHUB_SHA
    output state-path "${INPUT_WORKING_DIRECTORY:-.}/$STATE_DIR"
    if [[ -n $first ]]; then
        output first-key "$namespace$first$sha"
        output first-restore-keys "$namespace$first$sha:"$'\n'"$namespace$first"
    else
        output first-key ""
        output first-restore-keys ""
    fi
    if [[ -n $second ]]; then
        output second-key "$namespace$second"
        output second-restore-keys "$namespace$second"
    else
        output second-key ""
        output second-restore-keys ""
    fi
    if [[ $save == true && -n $first ]]; then
        # Cache entries are immutable: each run saves under a new key.
        output save-key "$namespace$first$sha:${GITHUB_RUN_ID:-0}-${GITHUB_RUN_ATTEMPT:-1}"
    else
        output save-key ""
    fi

    # A state left in the checkout (a self-hosted runner's earlier job) is
    # kept aside and merged like a restored one; the restores need the
    # path empty.
    local dir
    dir=$(scratch)
    rm -rf "$dir"
    mkdir -p "$dir"
    local state="${INPUT_WORKING_DIRECTORY:-.}/$STATE_DIR"
    if [[ -d $state ]]; then
        mv "$state" "$dir/local"
    fi
}

# The id of the tool's version, for the cache of its binary: the sources
# when it is built from the action's checkout, else what is installed.
tool_key() {
    local source=${INPUT_INSTALL:-action}
    if [[ $source == action ]]; then
        local root=${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH is not set}
        (cd "$root" && find Cargo.toml Cargo.lock cargo-ekstazi ekstazi-core ekstazi-runtime ekstazi-wire \
            -type f \( -name '*.rs' -o -name '*.toml' -o -name '*.lock' \) -print0 2>/dev/null |
            LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
    else
        printf '%s' "$source" | sha256sum | cut -c1-16
    fi
}

install() {
    : "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
    local source=${INPUT_INSTALL:-action}
    local root=${INPUT_TOOL_ROOT:?INPUT_TOOL_ROOT is not set}
    root=${root/#\~/$HOME}
    if [[ $source == skip ]]; then
        command -v cargo-ekstazi >/dev/null || die "install: skip, but cargo-ekstazi is not on PATH"
        return
    fi
    if [[ -n ${GITHUB_PATH:-} ]]; then
        printf '%s\n' "$root/bin" >>"$GITHUB_PATH"
    fi
    if [[ -x $root/bin/cargo-ekstazi ]]; then
        echo "cargo-ekstazi: cached: $("$root/bin/cargo-ekstazi" --version)"
        return
    fi
    if [[ $source == action ]]; then
        cargo install --locked --root "$root" --path "${GITHUB_ACTION_PATH:?}/cargo-ekstazi"
    else
        local words
        read -r -a words <<<"$source"
        cargo install --locked --root "$root" "${words[@]}"
    fi
}

stash() {
    local state="${INPUT_WORKING_DIRECTORY:-.}/$STATE_DIR" dir
    dir=$(scratch)
    mkdir -p "$dir"
    rm -rf "$dir/first"
    if [[ -d $state ]]; then
        mv "$state" "$dir/first"
    fi
}

run() {
    : "${GITHUB_OUTPUT:?GITHUB_OUTPUT is not set}"
    command -v jq >/dev/null || die "jq is needed for the job summary (GitHub's runners have it)"
    read_shard
    local dir
    dir=$(scratch)
    mkdir -p "$dir"
    cd "${INPUT_WORKING_DIRECTORY:-.}"
    rm -rf "$dir/second"
    if [[ -d $STATE_DIR ]]; then
        mv "$STATE_DIR" "$dir/second"
    fi

    # Combine what was restored. A state this version cannot read (another
    # record format) is left out, with a warning: its tests run.
    local restored=0 source
    mkdir -p "$STATE_DIR"
    for source in "$dir/local" "$dir/first" "$dir/second"; do
        [[ -d $source ]] || continue
        if cargo ekstazi merge-state --state-dir "$STATE_DIR" "$source"; then
            restored=$((restored + 1))
        else
            warn "the state restored into $(basename "$source") could not be merged: its tests run"
        fi
    done
    ((restored > 0)) || warn "no state was restored: every test runs (the next run will have this one's)"

    # The remote store: every run fetches from it before selecting.
    [[ -z ${INPUT_REMOTE:-} ]] || export EKSTAZI_REMOTE=$INPUT_REMOTE
    local command=${INPUT_COMMAND:-test}
    local report="$dir/report.json" junit="$dir/junit.xml" listing="$dir/list.json"
    rm -f "$report" "$junit" "$listing"
    local args=()
    if [[ -n ${INPUT_ARGS:-} ]]; then
        read -r -a args <<<"$INPUT_ARGS"
    fi
    local ours=(--state-dir "$STATE_DIR")
    ((shards == 1)) || ours+=(--partition "hash:$shard/$shards")
    # Only the commands that run tests take it (`list` records nothing anyway).
    local record=()
    run_records || record=(--no-record)
    local status=0
    case $command in
        test)
            [[ ${INPUT_AUDIT:-false} != true ]] || ours+=(--audit)
            cargo ekstazi test "${ours[@]}" "${record[@]}" --junit "$junit" --report-json "$report" "${args[@]}" || status=$?
            ;;
        nextest)
            # `nextest` writes no report: the selection, listed just
            # before, is what the summary shows (nextest's own JUnit is
            # configured in .config/nextest.toml).
            local cargo_args=() word
            for word in "${args[@]}"; do
                [[ $word != -- ]] || break
                cargo_args+=("$word")
            done
            cargo ekstazi list --json "${ours[@]}" "${cargo_args[@]}" >"$listing" || status=$?
            if ((status == 0)); then
                cargo ekstazi nextest "${ours[@]}" "${record[@]}" "${args[@]}" || status=$?
            fi
            ;;
        *) die "command must be test or nextest, not '$command'" ;;
    esac

    output exit-code "$status"
    if [[ -f $report ]]; then
        output report "$report"
        summarise "$report" report
    elif [[ -f $listing && -s $listing ]]; then
        summarise "$listing" list
    else
        summary_line "### cargo-ekstazi"$'\n\n'"The run ended (exit status $status) before it selected the tests: see the log."
    fi
    if [[ -f $junit ]]; then
        output junit "$junit"
    else
        output junit ""
    fi
    # A push to the default branch shares what it recorded. A push that
    # fails costs a warning: the run's verdicts stand.
    if [[ -n ${INPUT_REMOTE:-} ]] && pushes_to_remote; then
        cargo ekstazi history --state-dir "$STATE_DIR" push ||
            warn "the records were not pushed to the remote store (see above)"
    fi
    return "$status"
}

# Whether this run pushes its records to the remote store: a push to the
# default branch.
pushes_to_remote() {
    [[ ${GITHUB_EVENT_NAME:-push} == push ]] || return 1
    local default_branch=${INPUT_DEFAULT_BRANCH:-}
    [[ -n $default_branch ]] || default_branch=$(event_field .repository.default_branch)
    [[ -n $default_branch ]] || default_branch=main
    [[ ${GITHUB_REF:-} == "refs/heads/$default_branch" ]]
}

summary_line() {
    if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
        printf '%s\n' "$1" >>"$GITHUB_STEP_SUMMARY"
    else
        printf '%s\n' "$1"
    fi
}

# The job summary from `--report-json` (kind `report`) or `list --json`
# (kind `list`): counts, the main reasons, time saved, failures, flaky
# tests and audit misses.
summarise() {
    local file=$1 kind=$2
    local shard_note=""
    ((shards == 1)) || shard_note=" (shard $shard of $shards)"
    local counts
    counts=$(jq -r --arg kind "$kind" '
        [.tests[] | select(.ignored != true)] as $t
        | ($t | map(select(.selected))) as $sel
        | ($t | map(select(.selected | not) | select((.reasons | length) == 0))) as $skip
        | ($t | map(select(.selected | not) | select((.reasons | length) > 0))) as $other
        | [($sel | length), ($skip | length), ($other | length),
           ($sel | map(select(.outcome == "passed")) | length),
           ($sel | map(select(.outcome != null and .outcome != "passed")) | length),
           ($skip | map(.last_duration // 0) | add // 0 | . * 100 | round / 100),
           ($skip | map(select(.last_duration == null)) | length)]
        | @tsv' "$file")
    local selected skipped other passed failed saved unknown
    IFS=$'\t' read -r selected skipped other passed failed saved unknown <<<"$counts"
    output selected "$selected"
    output skipped "$skipped"
    output failed "$failed"

    local body
    body="### cargo-ekstazi: $selected selected, $skipped skipped as unaffected$shard_note"$'\n\n'
    body+="| tests | count |"$'\n'"|---|---:|"$'\n'
    body+="| selected | $selected |"$'\n'
    if [[ $kind == report ]]; then
        body+="| passed | $passed |"$'\n'"| failed | $failed |"$'\n'
    fi
    body+="| skipped as unaffected | $skipped |"$'\n'
    ((other == 0)) || body+="| affected, run by another shard | $other |"$'\n'
    if ((skipped > 0)); then
        local estimate="~${saved} s"
        ((unknown == 0)) || estimate+=" ($unknown without a recorded duration)"
        body+="| time saved (the skipped tests' last durations) | $estimate |"$'\n'
    fi
    summary_line "$body"

    local reasons
    reasons=$(jq -r '
        [.tests[] | select(.selected) | .reasons[]]
        | group_by(.) | map({reason: .[0], tests: length})
        | sort_by(-.tests, .reason) | .[:8][]
        | "| \(.reason | gsub("\\|"; "\\|")) | \(.tests) |"' "$file")
    if [[ -n $reasons ]]; then
        summary_line "**Why the selected tests ran** (the most common reasons)"$'\n\n'"| reason | tests |"$'\n'"|---|---:|"$'\n'"$reasons"$'\n'
    fi

    local failures flaky missed
    failures=$(jq -r '.tests[] | select(.outcome != null and .outcome != "passed")
        | "- `\(.binary) \(.name)`: \(.outcome)"' "$file" | head -n 30)
    [[ -z $failures ]] || summary_line "**Failed**"$'\n\n'"$failures"$'\n'
    flaky=$(jq -r '.tests[] | select(.flaky == true) | "- `\(.binary) \(.name)`"' "$file" | head -n 30)
    [[ -z $flaky ]] || summary_line "**Flaky** (passed only when run again; they run next time too)"$'\n\n'"$flaky"$'\n'
    missed=$(jq -r '(.audit.missed // [])[] | "- `\(.)`"' "$file" | head -n 30)
    [[ -z $missed ]] || summary_line "**Audit misses** (the selection would have skipped these failing tests)"$'\n\n'"$missed"$'\n'
    return 0
}

case ${1:-} in
    keys) keys ;;
    tool-key) tool_key ;;
    install) install ;;
    stash) stash ;;
    run) run ;;
    *) die "usage: $0 keys|tool-key|install|stash|run" ;;
esac
