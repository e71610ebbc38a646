#!/usr/bin/env bash
# 'make test' (all) and 'make e2e' (e2e): the test runs, arranged for a 2-core machine.
#
# The Debian 13 modules share one cluster and are the longest path: they start first. Their
# cluster's bring-up (a cold configure of seven nodes) keeps both cores busy; the rest of that
# path mostly waits on Slurm, its timers and the alerts. So the other runs start once that
# bring-up has ended (tests/e2e/conftest.py writes the marker, whether it went up or not) and
# run beside the Debian 13 tests, one after the other: lint beside the unit tests ('all'
# only), then the Debian 12 module (its own cluster: nothing is shared, not names, networks
# or state directories). The Debian 13 run prints as it goes; the others' logs follow it.
# Exit status: 0 when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
what=${1:-all}
case "$what" in
    all | e2e) ;;
    *) echo "usage: tests/schedule.sh [all|e2e]" >&2; exit 2 ;;
esac
BIN=${BIN:-.venv/bin}
logs=.metalslurm
marker=$logs/e2e-debian13-up
debian12=tests/e2e/test_local_cluster_debian12.py
mkdir -p "$logs"
rm -f "$marker" "$logs"/schedule-*.rc

"$BIN"/pytest tests/e2e --ignore="$debian12" --durations=20 &
debian13=$!

beside() {
    local waited=0
    while [ ! -e "$marker" ] && kill -0 "$debian13" 2>/dev/null; do
        sleep 5
        waited=$((waited + 5))
    done
    echo "started ${waited} s after the Debian 13 run" > "$logs/schedule-beside.txt"
    if [ "$what" = all ]; then
        make --no-print-directory -j2 --output-sync=target lint unit \
            > "$logs/schedule-lint-unit.log" 2>&1
        echo $? > "$logs/schedule-lint-unit.rc"
    fi
    "$BIN"/pytest "$debian12" -p no:cacheprovider --durations=10 \
        > "$logs/schedule-debian12.log" 2>&1
    echo $? > "$logs/schedule-debian12.rc"
}
beside &
others=$!

wait "$debian13"
rc=$?
wait "$others"
echo "== run beside the Debian 13 modules: $(cat "$logs/schedule-beside.txt" 2>/dev/null) =="
for run in lint-unit debian12; do
    [ "$what" = e2e ] && [ "$run" = lint-unit ] && continue
    sub=$(cat "$logs/schedule-$run.rc" 2>/dev/null || echo "not run")
    echo "== $run (exit $sub) =="
    cat "$logs/schedule-$run.log" 2>/dev/null
    [ "$sub" = 0 ] || rc=1
done
[ "$rc" -eq 0 ] && echo "== every run passed ==" || echo "== a run failed (exit 1) =="
exit "$rc"
