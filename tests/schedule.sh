#!/usr/bin/env bash
# 'make test' (all) and 'make e2e' (e2e): the test runs, arranged for a 2-core machine.
#
# Four paths run at once, so that one's waiting (on Slurm's timers, jobs, reboots, alerts,
# resumes) is another's working time:
# - Lanes a and b: the Debian 13 modules, each lane on its own cluster made from the one
#   stack file (tests/e2e/cluster.py, DEBIAN13_LANES). Lane a starts first; its bring-up (a
#   configure of seven nodes, with the prepared images built first) keeps both cores busy.
#   Once it has ended (tests/e2e/conftest.py writes the marker, whether it went up or not)
#   lane b brings up its own cluster from the images lane a built. LANE_B names lane b's
#   modules (about half of the Debian 13 modules' time, by the per-module figures the runs
#   print); a module that names lane a's addresses stays in lane a.
# - Once lane b is up too (its marker; two bring-ups' boots beside lint once left a node
#   without sshd past 90 s), the cold path: the Debian 12 module (its own cluster, from the
#   bare image), then the look-alike rented servers' module (its own machines; never beside
#   the Debian 12 module: two cold configures at once on two cores timed SSH out).
# - At the same time, the machines made anew (OWN_CLUSTER: its own small cluster from lane
#   a's prepared images, most of its time waiting on resumes and suspends), then the scale
#   lab (its own container).
# - Beside them all from then, at a lower CPU priority (nice 5): the power drivers' module
#   (its own tiny containers and BMC stand-ins), lint and the unit tests ('all' only). They
#   wait for nothing, so they take the cores' idle time rather than starve the clusters:
#   on cgroup v1 every node container together weighs as much as one ordinary process of
#   the host.
# Lane a prints as it goes; the others' logs follow it. Exit status: 0 when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
what=${1:-all}
case "$what" in
    all | e2e) ;;
    *) echo "usage: tests/schedule.sh [all|e2e]" >&2; exit 2 ;;
esac
BIN=${BIN:-.venv/bin}
logs=.metalslurm
marker=$logs/e2e-debian13-a-up
debian12=tests/e2e/test_local_cluster_debian12.py
rented=tests/e2e/test_rented_servers.py
power=tests/e2e/test_power_drivers.py
LANE_B=(tests/e2e/test_accounting.py tests/e2e/test_elastic.py tests/e2e/test_gpu_driver.py
        tests/e2e/test_training.py tests/e2e/test_rest.py tests/e2e/test_health.py)
OWN_CLUSTER=(tests/e2e/test_launched_nodes.py tests/e2e/test_scale_lab.py)
mkdir -p "$logs"
rm -f "$logs"/e2e-debian13-*-up "$logs"/schedule-*.rc "$logs"/schedule-*.txt

ignored=()
for module in "$debian12" "$rented" "$power" "${LANE_B[@]}" "${OWN_CLUSTER[@]}"; do
    ignored+=(--ignore="$module")
done
METALSLURM_E2E_LANE=a "$BIN"/pytest tests/e2e "${ignored[@]}" --durations=20 &
debian13=$!

# Waits until a lane's bring-up has ended (its marker $1) or its run (pid $2) has.
wait_for_bring_up() {
    while [ ! -e "$1" ] && kill -0 "$2" 2>/dev/null; do
        sleep 5
    done
}

# Runs pytest on the modules named after $1 (the run's name), its output in its log and
# its exit status in its .rc file.
run_modules() {
    local name=$1
    shift
    "$BIN"/pytest "$@" -p no:cacheprovider --durations=10 > "$logs/schedule-$name.log" 2>&1
    echo $? > "$logs/schedule-$name.rc"
}

lane_b() {
    wait_for_bring_up "$marker" "$debian13"
    echo "started ${SECONDS} s into the run" > "$logs/schedule-lane-b.txt"
    METALSLURM_E2E_LANE=b run_modules debian13-b "${LANE_B[@]}"
}
lane_b &
other_lane=$!

# Waits until both lanes' bring-ups have ended, and says when in "$logs/schedule-$1.txt".
after_both_bring_ups() {
    wait_for_bring_up "$marker" "$debian13"
    wait_for_bring_up "$logs/e2e-debian13-b-up" "$other_lane"
    echo "started ${SECONDS} s into the run" > "$logs/schedule-$1.txt"
}

cold() {
    after_both_bring_ups cold
    run_modules debian12 "$debian12"
    run_modules rented "$rented"
}
cold &
cold_path=$!

own_cluster() {
    after_both_bring_ups own-cluster
    run_modules own-cluster "${OWN_CLUSTER[@]}"
}
own_cluster &
own_path=$!

background() {
    after_both_bring_ups background
    renice -n 5 -p "$BASHPID" > /dev/null  # and so everything it starts
    run_modules power "$power" &
    if [ "$what" = all ]; then
        make --no-print-directory -j2 --output-sync=target lint unit \
            > "$logs/schedule-lint-unit.log" 2>&1
        echo $? > "$logs/schedule-lint-unit.rc"
    fi
    wait
}
background &
others=$!

wait "$debian13"
rc=$?
wait "$other_lane" "$cold_path" "$own_path" "$others"
for path in lane-b cold own-cluster background; do
    echo "== $path $(cat "$logs/schedule-$path.txt" 2>/dev/null || echo "did not start")"
done
echo "== all done after ${SECONDS} s =="
for run in debian13-b debian12 rented own-cluster power lint-unit; do
    [ "$what" = e2e ] && [ "$run" = lint-unit ] && continue
    sub=$(cat "$logs/schedule-$run.rc" 2>/dev/null || echo "not run")
    echo "== $run (exit $sub) =="
    cat "$logs/schedule-$run.log" 2>/dev/null
    [ "$sub" = 0 ] || rc=1
done
[ "$rc" -eq 0 ] && echo "== every run passed ==" || echo "== a run failed (exit 1) =="
exit "$rc"
