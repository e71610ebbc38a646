#!/usr/bin/env bash
# 'make test' (all) and 'make e2e' (e2e): the test runs, arranged for a 2-core machine.
#
# The Debian 13 modules are the longest part, and most of their time is waiting (on Slurm's
# timers, jobs, reboots, alerts): they run in two lanes at once, each on its own cluster made
# from the one stack file (tests/e2e/cluster.py, DEBIAN13_LANES). First the prepared images
# both clusters are made from are built (nothing to do where they exist: about 4 minutes
# where they do not); then both lanes bring their clusters up at the same time (a configure
# of a few nodes each from those images; lane b's after lane a's kept the two cores about
# 70 % busy for the run's first three minutes, and both at once end about 20 s sooner:
# docs/lab/benchmarks.md). Beside them from the start, lint and the unit tests ('all'
# only), in a session of their own weighed as the lowest priority (its autogroup as nice
# 19), which takes only what the two bring-ups leave idle. Should the images' build fail,
# lane b waits for lane a's bring-up (tests/e2e/conftest.py writes a marker when it ends,
# whether it went up or not), which builds them or fails saying why. Once both bring-ups
# have ended (lane b's marker too), lint's session is weighed as nice 0, and the other paths
# start beside both lanes:
# - the modules with machines of their own, one after the other: the Debian 12 module (its
#   own cluster, on the cold path), the look-alike rented servers' module (its own machines:
#   never beside the Debian 12 module, as two cold configures at once on two cores timed
#   SSH out), the scale lab (its own container), the power drivers' module (its own tiny
#   containers and BMC stand-ins: nearly all its time waits on the machines it powers, so
#   it goes where the cores have room, at the end of the path that ends first);
# - after lint and the unit tests (nothing in them waits on a clock the others hold, so
#   they take the cores whenever the clusters' runs wait), the backup
#   controller's module and the module of machines made anew in one run (one small cluster
#   for both, from lane a's prepared images, brought up once: tests/e2e/conftest.py
#   ha_cluster; most of their time waits on SlurmctldTimeout, SuspendTime and reboots, so
#   they run where the others keep the cores busy, not alone at the end). Its bring-up
#   waits for lint's end: two bring-ups beside lint on two cores once left a node's sshd
#   silent for minutes.
# LANE_B names lane b's modules: about half of the Debian 13 modules' time (the per-module
# figures the runs print, with the CPU-seconds they keep the machine busy); a module that
# names lane a's addresses stays in lane a. The four paths (lane a; lane b; the machines of
# their own; lint and the backup controller's cluster) end within a few minutes of each
# other when each module takes what it took in the last rehearsals (docs/reference/testing.md):
# a module moved between them moves that.
# Lane a prints as it goes; the others' logs follow it, then the machine's busy CPU-seconds
# over the whole run (.metalslurm/schedule-cpu.txt: /proc/stat every 10 s), which says how
# much of the two cores the arrangement left idle.
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
marker=$logs/e2e-debian13-a-up
debian12=tests/e2e/test_local_cluster_debian12.py
LANE_B=(tests/e2e/test_health.py tests/e2e/test_training.py tests/e2e/test_elastic.py
        tests/e2e/test_gpu_driver.py tests/e2e/test_maintain.py tests/e2e/test_backup_restore.py
        tests/e2e/test_slurm_upgrade.py tests/e2e/test_tenants.py)
# The two modules of the small cluster with a backup controller, the backup's first.
ha=(tests/e2e/test_failover.py tests/e2e/test_launched_nodes.py)
rented=tests/e2e/test_rented_servers.py
power=tests/e2e/test_power_drivers.py
scale_lab=tests/e2e/test_scale_lab.py
mkdir -p "$logs"
rm -f "$logs"/e2e-debian13-*-up "$logs"/schedule-*.rc "$logs"/schedule-*.txt \
    "$logs"/e2e-ansible-runs-*.tsv
# The failed tests' evidence of earlier runs goes here, once: each pytest run below keeps
# the others' (tests/e2e/evidence.py), so .ci/run can print all of it at the end.
rm -rf "$logs/e2e-evidence"
export METALSLURM_E2E_SCHEDULED=1

# The machine's busy CPU-seconds (all CPUs, /proc/stat's user to steal, in USER_HZ ticks)
# every 10 s, "<seconds into the run> <ticks>", until the runs end.
busy_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}
sample_cpu() {
    while :; do
        echo "$SECONDS $(busy_ticks)" >> "$logs/schedule-cpu.txt"
        sleep 10
    done
}
sample_cpu &
sampler=$!
trap 'kill "$sampler" 2>/dev/null' EXIT

not_lane_a=()
for module in "${LANE_B[@]}" "${ha[@]}" "$debian12" "$rented" "$power" "$scale_lab"; do
    not_lane_a+=(--ignore="$module")
done
# Waits until a lane's bring-up has ended (its marker $1) or its run (pid $2) has.
wait_for_bring_up() {
    while [ ! -e "$1" ] && kill -0 "$2" 2>/dev/null; do
        sleep 5
    done
}

# Runs pytest on modules ($3...) beside lane a, with $2 slowest durations listed: its output
# in .metalslurm/schedule-$1.log, its exit status in schedule-$1.rc, when it ran (seconds
# into the run) in schedule-times.txt.
run_modules() {
    local name=$1 durations=$2 began=$SECONDS
    shift 2
    "$BIN"/pytest "$@" -p no:cacheprovider --durations="$durations" \
        > "$logs/schedule-$name.log" 2>&1
    echo $? > "$logs/schedule-$name.rc"
    echo "$name: ${began}-${SECONDS} s" >> "$logs/schedule-times.txt"
}

# The Debian 13 stack's prepared images, which both lanes' clusters are made from (nothing
# to do where they exist): built here, before either lane starts, so that the two lanes
# bring their clusters up at the same time. Where this fails, lane b waits for lane a's
# bring-up instead, which builds them (or fails, saying why).
images_began=$SECONDS
images=failed
if stack=$("$BIN"/python -c 'from tests.e2e.cluster import DEBIAN13_STACK, e2e_stack
print(e2e_stack(DEBIAN13_STACK))' 2> "$logs/schedule-images.log") \
        && "$BIN"/metalslurm image build --stack "$stack" >> "$logs/schedule-images.log" 2>&1; then
    images=ready
fi
echo "images: ${images_began}-${SECONDS} s ($images)" >> "$logs/schedule-times.txt"

lane_a_began=$SECONDS
METALSLURM_E2E_LANE=a "$BIN"/pytest tests/e2e "${not_lane_a[@]}" --durations=20 &
debian13=$!

lane_b() {
    [ "$images" = ready ] || wait_for_bring_up "$marker" "$debian13"
    echo "started ${SECONDS} s into the run" > "$logs/schedule-lane-b.txt"
    METALSLURM_E2E_LANE=b run_modules debian13-b 20 "${LANE_B[@]}"
}
lane_b &
other_lane=$!

# Waits until both lanes' bring-ups have ended.
wait_for_both_lanes() {
    wait_for_bring_up "$marker" "$debian13"
    wait_for_bring_up "$logs/e2e-debian13-b-up" "$other_lane"
}

# Every process below pid $1 (children's children too), from /proc.
descendants() {
    cat /proc/[0-9]*/stat 2>/dev/null | awk -v root="$1" '
        { pid = $1; rest = $0; sub(/.*\) /, "", rest); split(rest, f, " "); parent[pid] = f[2] }
        END { tree[root] = 1
              do { grew = 0
                   for (p in parent) if (!(p in tree) && (parent[p] in tree)) { tree[p] = 1; grew = 1 }
              } while (grew)
              for (p in tree) if (p != root) print p }'
}

# True once pid $1 leads a session of its own (setsid has made it: at most 5 s after the
# start), false if it has ended: never for a later process that got the pid of lint's make
# (a lane's, which weighing would slow).
leads_session() {
    local tries=50 session
    while [ -e "/proc/$1" ] && [ $((tries -= 1)) -gt 0 ]; do
        session=$(awk '{ sub(/.*\) /, ""); print $4 }' "/proc/$1/stat" 2>/dev/null)
        [ "$session" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# True if pid $1 is in an autogroup other than this shell's: never the run's own group,
# which holds the lanes.
own_autogroup() {
    local mine theirs
    read -r mine _ < "/proc/$BASHPID/autogroup" && read -r theirs _ < "/proc/$1/autogroup" \
        && [ "$theirs" != "$mine" ]
}

# Weighs lint's processes (session leader $1) against the rest of the run: where the
# kernel schedules by session (autogroups, sched_autogroup_enabled), the session's group
# as nice $2 (its weight against the other sessions and the node containers' cgroup: nice
# inside a group only ranks that group's own processes); elsewhere each process as nice $3
# (the processes already running and, through their parents, those they start).
weigh_lint() {
    # shellcheck disable=SC2046  # descendants: one pid a word
    if ! leads_session "$1"; then
        echo "not weighed (ended)"
    elif [ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" = 1 ] \
            && own_autogroup "$1" && echo "$2" 2>/dev/null > "/proc/$1/autogroup"; then
        echo "autogroup nice $2"
    elif env -u POSIXLY_CORRECT renice -n "$3" -p "$1" $(descendants "$1") > /dev/null 2>&1; then
        echo "nice $3"
    else
        echo "not weighed (renice failed: lint ended, or lowering a nice value needs root)"
    fi
}

# Lint and the unit tests from the start, in a session of their own (setsid), weighed as
# the lowest priority while the lanes bring their clusters up: two bring-ups at once left
# the cores about a third idle for three minutes (waiting on slurmd's registrations, the
# elastic nodes' power-down, Prometheus' first scrape), and lint takes only what they leave
# (at nice 19 inside the run's own session it took half the cores from the node
# containers, whose cgroup weighs as one session, and the bring-ups took 260 s instead of
# 175). Once both lanes are up, weighed as one more session (nice 10 per process where the
# kernel has no autogroups), so that they end in time for the backup controller's cluster,
# brought up once they have ended (two bring-ups beside lint on two cores once left a
# node's sshd silent for minutes).
lint_unit_then_ha() {
    local began=$SECONDS
    if [ "$what" = all ]; then
        setsid --wait make --no-print-directory -j2 --output-sync=target lint unit \
            > "$logs/schedule-lint-unit.log" 2>&1 &
        local lint=$! weight
        # A run stopped with SIGTERM stops lint's session too (its own process group).
        trap 'kill -- -"$lint" 2>/dev/null; exit 143' TERM
        weight=$(weigh_lint "$lint" 19 19)
        echo "lint-unit: $weight from ${SECONDS} s" >> "$logs/schedule-times.txt"
        wait_for_both_lanes
        weight=$(weigh_lint "$lint" 0 10)
        echo "lint-unit: $weight from ${SECONDS} s" >> "$logs/schedule-times.txt"
        wait "$lint"
        echo $? > "$logs/schedule-lint-unit.rc"
        trap - TERM
        echo "lint-unit: ${began}-${SECONDS} s" >> "$logs/schedule-times.txt"
    fi
    wait_for_both_lanes
    echo "started ${SECONDS} s into the run" > "$logs/schedule-ha.txt"
    run_modules ha 10 "${ha[@]}"
}
lint_unit_then_ha &
checks=$!

# The modules with machines of their own, one after the other, from the same moment:
# Debian 12's cluster, the look-alike rented servers, the scale lab, the power drivers'.
beside() {
    wait_for_both_lanes
    echo "started ${SECONDS} s into the run" > "$logs/schedule-beside.txt"
    run_modules debian12 10 "$debian12"
    run_modules rented 10 "$rented"
    run_modules scale-lab 5 "$scale_lab"
    run_modules power 5 "$power"
}
beside &
others=$!

wait "$debian13"
rc=$?
echo "debian13-a: ${lane_a_began}-${SECONDS} s" >> "$logs/schedule-times.txt"
wait "$other_lane" "$others" "$checks"
kill "$sampler" 2>/dev/null
lint_said=""
if [ "$what" = all ]; then
    lint_said="; lint and the unit tests beside the lanes ($(grep '^lint-unit: ' \
        "$logs/schedule-times.txt" 2>/dev/null | cut -d' ' -f2- | paste -sd, - | sed 's/,/, /g')), then"
fi
echo "== the prepared images $(grep '^images:' "$logs/schedule-times.txt" 2>/dev/null | cut -d' ' -f2-);" \
     "lane b $(cat "$logs/schedule-lane-b.txt" 2>/dev/null); the Debian 12 module, then the" \
     "rented servers', the scale lab and the power drivers' modules" \
     "$(cat "$logs/schedule-beside.txt" 2>/dev/null)${lint_said:-; then}" \
     "the backup controller's and the machines made anew modules," \
     "$(cat "$logs/schedule-ha.txt" 2>/dev/null); all done after ${SECONDS} s =="
for run in debian13-b lint-unit power debian12 ha rented scale-lab; do
    [ "$what" = e2e ] && [ "$run" = lint-unit ] && continue
    sub=$(cat "$logs/schedule-$run.rc" 2>/dev/null || echo "not run")
    echo "== $run (exit $sub) =="
    cat "$logs/schedule-$run.log" 2>/dev/null
    [ "$sub" = 0 ] || rc=1
done
# What the two cores did: each run's span, and the machine's busy share over the whole run.
echo "== when each run ran (seconds into the run) =="
cat "$logs/schedule-times.txt" 2>/dev/null
awk -v cores="$(nproc)" -v hz="$(getconf CLK_TCK)" '
    NR == 1 { t0 = $1; b0 = $2 } { t = $1; b = $2 }
    END { if (t > t0) printf "== the machine was busy %.0f of %.0f CPU-s (%.0f%% of %d cores) ==\n",
                             (b - b0) / hz, (t - t0) * cores, 100 * (b - b0) / hz / ((t - t0) * cores), cores }' \
    "$logs/schedule-cpu.txt" 2>/dev/null
[ "$images" = ready ] || { echo "== the prepared images' build before the lanes failed" \
    "(lane a's bring-up then built them itself, or failed saying why) =="
    cat "$logs/schedule-images.log"; }
[ "$rc" -eq 0 ] && echo "== every run passed ==" || echo "== a run failed (exit 1) =="
exit "$rc"
