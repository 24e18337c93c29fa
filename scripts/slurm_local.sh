#!/usr/bin/env bash
# A real single-node Slurm cluster on this Debian machine, for `make test-cluster` and for
# trying `python -m diffgrpo.study <params> --executor slurm` before a real cluster.
#
#   scripts/slurm_local.sh start    # install (apt-get, once) and start munged, slurmctld, slurmd
#   scripts/slurm_local.sh stop     # stop the three daemons
#   scripts/slurm_local.sh status   # exit 0 when the node answers `sinfo` as idle/mixed/allocated
#
# Needs root and Debian's packages (slurm-wlm, munge). One node with this machine's CPUs and
# memory, one partition `debug`, no accounting database (sacct fails; submitit falls back to
# squeue), no systemd: each daemon is started directly and stopped by its pid file. The
# configuration is docs/cluster.md's "A cluster on this machine".
set -euo pipefail

CONF=/etc/slurm/slurm.conf
SPOOL=/var/spool/slurm
PIDS=(/run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid)

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "error: $0 $1 needs root (it installs packages and starts the Slurm daemons)" >&2
        exit 2
    fi
}

node_up() {
    command -v sinfo >/dev/null 2>&1 || return 1
    local state
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1) || return 1
    case "$state" in idle*|mixed*|allocated*|completing*) return 0 ;; *) return 1 ;; esac
}

install() {
    if command -v slurmctld >/dev/null && command -v munged >/dev/null; then return; fi
    if ! command -v apt-get >/dev/null; then
        echo "error: no apt-get: this script sets Slurm up on Debian/Ubuntu only" >&2
        exit 2
    fi
    echo "installing slurm-wlm and munge (apt-get, about a minute)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_conf() {
    local host cpus mem
    host=$(hostname)
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))  # MB, leaving the system a tenth
    mkdir -p /etc/slurm "$SPOOL/ctld" "$SPOOL/d" /var/log/slurm
    cat > "$CONF" <<EOF
# written by diffgrpo's scripts/slurm_local.sh: one node, one partition, no accounting
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
MinJobAge=30
KillWait=10
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start() {
    need_root start
    if node_up; then echo "slurm is running: $(sinfo -h -N -o '%N %T %c CPUs %m MB')"; return; fi
    install
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    fi
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge && chown munge:munge /run/munge
    if ! pgrep -x munged >/dev/null; then runuser -u munge -- /usr/sbin/munged; fi
    write_conf
    stop_daemon /run/slurmd.pid
    stop_daemon /run/slurmctld.pid
    /usr/sbin/slurmctld
    /usr/sbin/slurmd
    for _ in $(seq 1 60); do
        if node_up; then echo "slurm is running: $(sinfo -h -N -o '%N %T %c CPUs %m MB')"; return; fi
        sleep 0.5
    done
    echo "error: the node did not come up in 30 s; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
    exit 1
}

stop_daemon() {
    local pidfile=$1 pid
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
    rm -f "$pidfile"
}

stop() {
    need_root stop
    for p in "${PIDS[@]}"; do stop_daemon "$p"; done
    echo "slurm stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if node_up; then sinfo -h -N -o '%N %T %c CPUs %m MB'; else echo "slurm is not running"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
