#!/usr/bin/env bash
# Runs a fixed list of memplan commands with two binaries and compares what each printed
# (stdout, stderr, exit status), timings masked: the check that a restructuring changes
# no behaviour (issues 18 and 28; benches/BENCHMARKS.md says what it found each time).
#
#   benches/compare_outputs.sh BEFORE_BINARY AFTER_BINARY [OUT_DIR]
#
# The commands: every valid step under ir/ (plan in text and JSON, check, print, expand,
# report by class, op and module, --print-ir-after-all, --schedule program, --no-inplace,
# the greedy and best-fit solvers, budgets 0.8x, 0.5x and 0.3x under every --checkpoint
# strategy, and a run with --compare-unplanned where the step is small); check and plan
# of every invalid one; every Checkmate graph of
# ../shared/bench/checkmate (schedule; remat at 0.9, 0.8, 0.6 under every strategy); every
# minimalloc and idealloc list (alloc with greedy and best-fit). Exit 0 when every
# command printed the same, else 1 with the commands that differ.
set -uo pipefail
cd "$(dirname "$0")/.."
before=$(realpath "$1")
after=$(realpath "$2")
out=${3:-$(mktemp -d)}
mkdir -p "$out/before" "$out/after"
bench=../shared/bench

commands=()
for f in ir/invalid/*.step; do
    commands+=("check $f" "plan $f")
done
for f in $(find ir -name '*.step' -not -path 'ir/invalid/*' | sort); do
    commands+=("plan $f" "plan $f --format json" "check $f" "print $f" "expand $f" "report $f"
        "report $f --by op" "report $f --by module" "plan $f --print-ir-after-all"
        "plan $f --schedule program" "plan $f --no-inplace" "plan $f --solver greedy"
        "plan $f --solver bestfit")
    case $f in
    # Full size: one budget (the search stops after a fixed amount of work well within
    # the limit given; a cut by the clock would make the output depend on the machine).
    ir/models/gpt2.step | ir/models/vgg16.step | ir/models/resnet18.step)
        commands+=("plan $f --budget 0.5x --time-limit 60")
        continue
        ;;
    esac
    for budget in 0.8x 0.5x 0.3x; do
        for strategy in auto none chen-sqrt chen-greedy near-optimal; do
            commands+=("plan $f --budget $budget --checkpoint $strategy")
        done
    done
done
# Runs on the CPU: the small steps only (the corpus test runs the same set).
for f in ir/features/*.step ir/models/*tiny*.step ir/models/mlp*.step ir/torch/*tiny*.step; do
    [ -f "$f" ] && commands+=("run $f --steps 2 --compare-unplanned")
done
for f in "$bench"/checkmate/*.json; do
    commands+=("schedule $f")
    for budget in 0.9 0.8 0.6; do
        for strategy in auto none chen-sqrt chen-greedy near-optimal; do
            commands+=("remat $f --budget $budget --checkpoint $strategy --time-limit 60")
        done
    done
done
for f in "$bench"/minimalloc/*.csv "$bench"/minimalloc/challenging/*.csv "$bench"/idealloc/*.csv; do
    commands+=("alloc $f --solver greedy" "alloc $f --solver bestfit")
done

# Timings: "time  0.123 s", "in 12 ms", "(0.5 s)" and the like, wherever they appear.
mask() {
    sed -E 's/[0-9]+(\.[0-9]+)? ?(s|ms|µs|us)\b/<time>/g'
}

differ=0
i=0
for command in "${commands[@]}"; do
    i=$((i + 1))
    for side in before after; do
        binary=$before
        [ "$side" = after ] && binary=$after
        # shellcheck disable=SC2086 # the command is words
        "$binary" $command >"$out/$side/$i.stdout" 2>"$out/$side/$i.stderr"
        echo "exit $?" >>"$out/$side/$i.stdout"
        for stream in stdout stderr; do
            mask <"$out/$side/$i.$stream" >"$out/$side/$i.$stream.masked"
        done
    done
    if ! cmp -s "$out/before/$i.stdout.masked" "$out/after/$i.stdout.masked" ||
        ! cmp -s "$out/before/$i.stderr.masked" "$out/after/$i.stderr.masked"; then
        echo "differs ($i): memplan $command"
        differ=$((differ + 1))
    fi
done
echo "$i commands, $differ differ (outputs in $out)"
[ "$differ" -eq 0 ]
