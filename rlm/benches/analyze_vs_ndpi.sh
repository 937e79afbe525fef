#!/usr/bin/env bash
# rlm analyze against ndpiReader on the same synthetic captures (make bench-analyze).
#
# 1. Builds `rlm` and the `gen_capture` example (release) and generates three captures of
#    PACKETS packets (default 1 M): html (20-60 KB pages with embeds), image (small pages,
#    many 5-50 KB images) and dense (80-120 KB of tag-dense HTML). They are kept in DIR and
#    reused while the generator is unchanged.
# 2. Runs `rlm analyze --quiet FILE`, `ndpiReader -i FILE -q` and the bare read of the file
#    (`tcpdump -r FILE -w /dev/null`: what a reader of the file cannot beat) alternately, RUNS
#    times each (default 3), with the file in the page cache; takes the median wall time,
#    packets/s and the peak RSS (/usr/bin/time -v "Maximum resident set size").
# 3. Memory against capture length: the generator piped into `rlm analyze -` (and into
#    `ndpiReader -i /dev/stdin`, for context) at PACKETS and BIG packets (default 10 M, never
#    written to disk); rlm's peak RSS at BIG must be within 2x of its peak at PACKETS.
# 4. Writes the figures to JSON (default target/bench-analyze.json) and prints a markdown table.
#
# Environment: PACKETS, BIG, RUNS, DIR (captures; default target/bench-analyze), JSON,
# PROFILES (default "html image dense"), STRICT=1 to exit 1 when the memory bound fails.
# The machine is shared: figures move with other load; compare within one run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PACKETS=${PACKETS:-1000000}
BIG=${BIG:-10000000}
RUNS=${RUNS:-3}
DIR=${DIR:-$ROOT/target/bench-analyze}
JSON=${JSON:-$ROOT/target/bench-analyze.json}
PROFILES=${PROFILES:-html image dense}
CARGO=${CARGO:-cargo}

for tool in ndpiReader tcpdump /usr/bin/time awk; do
    command -v "$tool" >/dev/null || { echo "bench-analyze: $tool not found (make deps installs libndpi-bin, tcpdump and time)" >&2; exit 1; }
done

cd "$ROOT"
"$CARGO" build --release --locked -p rlm --bin rlm --example gen_capture >&2
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
RLM=$TARGET/release/rlm
GEN=$TARGET/release/examples/gen_capture
mkdir -p "$DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# One run: "<wall seconds> <peak RSS KB> <exit status>". Wall time from the clock, RSS from time -v.
measure() {
    local start end rc=0
    start=$(date +%s%N)
    /usr/bin/time -v -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err" || rc=$?
    end=$(date +%s%N)
    local rss
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$TMP/time")
    echo "$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", (b - a) / 1e9}') $rss $rc"
}

# The same through a pipe from the generator: "<wall> <RSS KB of the consumer> <status>".
measure_piped() {
    local profile=$1 packets=$2
    shift 2
    local start end rc=0
    start=$(date +%s%N)
    "$GEN" --profile "$profile" --packets "$packets" --out - | /usr/bin/time -v -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err" || rc=$?
    end=$(date +%s%N)
    local rss
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$TMP/time")
    echo "$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", (b - a) / 1e9}') $rss $rc"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

gen_id=$(sha256sum "$GEN" | cut -c1-12)
json_rows=()
md_rows=()
mem_rows=()
mem_json=()
mem_ok=true

for profile in $PROFILES; do
    f=$DIR/$profile-$PACKETS.pcap
    if [ ! -s "$f" ] || [ "$(cat "$f.gen" 2>/dev/null)" != "$gen_id" ]; then
        echo "generating $f" >&2
        "$GEN" --profile "$profile" --packets "$PACKETS" --out "$f.tmp"
        mv "$f.tmp" "$f"
        echo "$gen_id" > "$f.gen"
    fi
    size=$(stat -c %s "$f")
    cat "$f" > /dev/null # into the page cache, for both tools alike
    rlm_t=() rlm_m=() ndpi_t=() ndpi_m=() bare_t=()
    for i in $(seq "$RUNS"); do
        read -r t m rc < <(measure "$RLM" analyze --quiet "$f")
        [ "$rc" = 0 ] || { echo "rlm analyze $f failed ($rc): $(cat "$TMP/err")" >&2; exit 1; }
        rlm_t+=("$t") rlm_m+=("$m")
        read -r t m rc < <(measure ndpiReader -i "$f" -q)
        [ "$rc" = 0 ] || { echo "ndpiReader $f failed ($rc): $(cat "$TMP/err")" >&2; exit 1; }
        ndpi_t+=("$t") ndpi_m+=("$m")
        read -r t _ rc < <(measure tcpdump -r "$f" -w /dev/null)
        [ "$rc" = 0 ] || { echo "tcpdump -r $f failed ($rc): $(cat "$TMP/err")" >&2; exit 1; }
        bare_t+=("$t")
        echo "$profile run $i: rlm ${rlm_t[-1]} s ${rlm_m[-1]} KB, ndpiReader ${ndpi_t[-1]} s ${ndpi_m[-1]} KB, bare read ${bare_t[-1]} s" >&2
    done
    rt=$(echo "${rlm_t[*]}" | median)
    nt=$(echo "${ndpi_t[*]}" | median)
    rm_=$(echo "${rlm_m[*]}" | median)
    nm=$(echo "${ndpi_m[*]}" | median)
    bt_=$(echo "${bare_t[*]}" | median)
    of_bare=$(awk -v b="$bt_" -v r="$rt" 'BEGIN {printf "%.2f", b / r}')
    rpps=$(awk -v p="$PACKETS" -v t="$rt" 'BEGIN {printf "%.0f", p / t}')
    npps=$(awk -v p="$PACKETS" -v t="$nt" 'BEGIN {printf "%.0f", p / t}')
    ratio=$(awk -v a="$rpps" -v b="$npps" 'BEGIN {printf "%.2f", a / b}')
    json_rows+=("{\"profile\": \"$profile\", \"packets\": $PACKETS, \"bytes\": $size, \"runs\": $RUNS, \"rlm\": {\"median_s\": $rt, \"packets_per_s\": $rpps, \"peak_rss_kb\": $rm_, \"wall_s\": [$(IFS=,; echo "${rlm_t[*]}")]}, \"ndpiReader\": {\"median_s\": $nt, \"packets_per_s\": $npps, \"peak_rss_kb\": $nm, \"wall_s\": [$(IFS=,; echo "${ndpi_t[*]}")]}, \"bare_read\": {\"median_s\": $bt_, \"wall_s\": [$(IFS=,; echo "${bare_t[*]}")]}, \"rlm_over_ndpi\": $ratio, \"rlm_over_bare_read\": $of_bare}")
    md_rows+=("| $profile | $PACKETS | $((size / 1048576)) MiB | $rt s | $(awk -v x="$rpps" 'BEGIN {printf "%.0f k", x / 1000}') | $((rm_ / 1024)) MiB | $nt s | $(awk -v x="$npps" 'BEGIN {printf "%.0f k", x / 1000}') | $((nm / 1024)) MiB | ${ratio}x | $bt_ s | $(awk -v x="$of_bare" 'BEGIN {printf "%.0f%%", x * 100}') |")

    # Memory against capture length, through a pipe (the big capture is never written).
    read -r _ small rc < <(measure_piped "$profile" "$PACKETS" "$RLM" analyze --quiet -)
    [ "$rc" = 0 ] || { echo "rlm analyze - ($profile, $PACKETS) failed ($rc): $(cat "$TMP/err")" >&2; exit 1; }
    read -r bt big rc < <(measure_piped "$profile" "$BIG" "$RLM" analyze --quiet -)
    [ "$rc" = 0 ] || { echo "rlm analyze - ($profile, $BIG) failed ($rc): $(cat "$TMP/err")" >&2; exit 1; }
    read -r _ nsmall _ < <(measure_piped "$profile" "$PACKETS" ndpiReader -i /dev/stdin -q)
    read -r _ nbig _ < <(measure_piped "$profile" "$BIG" ndpiReader -i /dev/stdin -q)
    growth=$(awk -v a="$big" -v b="$small" 'BEGIN {printf "%.2f", a / b}')
    ok=$(awk -v g="$growth" 'BEGIN {print (g <= 2.0) ? "true" : "false"}')
    [ "$ok" = true ] || mem_ok=false
    echo "$profile memory: rlm $small KB at $PACKETS, $big KB at $BIG (x$growth); ndpiReader $nsmall KB, $nbig KB" >&2
    mem_json+=("{\"profile\": \"$profile\", \"packets\": [$PACKETS, $BIG], \"rlm_peak_rss_kb\": [$small, $big], \"rlm_growth\": $growth, \"within_2x\": $ok, \"ndpiReader_peak_rss_kb\": [$nsmall, $nbig]}")
    mem_rows+=("| $profile | $((small / 1024)) MiB | $((big / 1024)) MiB | ${growth}x | $([ "$ok" = true ] && echo yes || echo "**no**") | $((nsmall / 1024)) MiB | $((nbig / 1024)) MiB |")
done

{
    echo "{"
    echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
    echo "  \"commit\": \"$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)\","
    echo "  \"ndpiReader\": \"$(ndpiReader -h 2>&1 | awk '/Welcome to nDPI/ {print $4}')\","
    echo "  \"cpus\": $(nproc),"
    echo "  \"throughput\": ["
    (IFS=$'\n'; echo "${json_rows[*]}") | sed 's/^/    /; $!s/$/,/'
    echo "  ],"
    echo "  \"memory\": ["
    (IFS=$'\n'; echo "${mem_json[*]}") | sed 's/^/    /; $!s/$/,/'
    echo "  ]"
    echo "}"
} > "$JSON"

echo
echo "Throughput: median of $RUNS alternating runs, file in the page cache (\`rlm analyze --quiet FILE\`, \`ndpiReader -i FILE -q\`, \`tcpdump -r FILE -w /dev/null\`)"
echo
echo "| capture | packets | size | rlm | rlm packets/s | rlm peak RSS | ndpiReader | ndpiReader packets/s | ndpiReader peak RSS | rlm / ndpiReader | bare read | rlm's speed / the bare read's |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${md_rows[@]}"
echo
echo "Peak RSS against capture length (generator piped in: \`rlm analyze -\`, \`ndpiReader -i /dev/stdin\`)"
echo
echo "| capture | rlm at $PACKETS | rlm at $BIG | growth | within 2x | ndpiReader at $PACKETS | ndpiReader at $BIG |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${mem_rows[@]}"
echo
echo "figures: $JSON"
if [ "$mem_ok" != true ] && [ "${STRICT:-0}" = 1 ]; then
    echo "bench-analyze: rlm's peak memory grew more than 2x with capture length" >&2
    exit 1
fi
