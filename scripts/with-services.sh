#!/usr/bin/env bash
# with-services.sh - run a command with PostgreSQL and Redis available.
#
# Usage: scripts/with-services.sh CMD [ARGS...]      (used by `make test`)
#
# NeoCloud's settings switch from the embedded defaults (SQLite, eager Celery)
# to PostgreSQL and Redis when DATABASE_URL / REDIS_URL are set, and the test
# suite should run against those. This script makes sure both servers are
# reachable, exports DATABASE_URL and REDIS_URL, runs CMD with them, then stops
# whatever servers it started itself and exits with CMD's exit status.
#
# For PostgreSQL and for Redis, separately, the first of these that works wins:
#   1. DATABASE_URL / REDIS_URL already set in the environment and reachable:
#      it is used as is.
#   2. A local server on 127.0.0.1 on the default port: PostgreSQL that accepts
#      user "postgres" without a password (trust auth) -> DATABASE_URL=
#      postgres://postgres@127.0.0.1:5432/neocloud (pytest-django creates
#      test_neocloud via the "postgres" maintenance DB, which is what we
#      check); Redis answering PING -> REDIS_URL=redis://127.0.0.1:6379/15
#      (db 15 so tests do not clash with a developer's db 0).
#   3. A throwaway server started in a temporary directory on a free port
#      (PostgreSQL from 55432 upward, Redis from 56379 upward), tuned for speed
#      (no fsync, no persistence). If the binaries are missing and we are root
#      with apt-get, the packages "postgresql" / "redis-server" are installed.
#      PostgreSQL refuses to run as root, so as root it runs as an unprivileged
#      user: "postgres" if it exists, else "nobody" (NEOCLOUD_PG_OS_USER
#      overrides). Redis runs as a background child of this script. The
#      throwaway servers are stopped and their directories removed on exit
#      (EXIT trap, so also when CMD fails, and on INT/TERM/HUP).
# Stripe, for the billing tests: STRIPE_MOCK_URL (stripe-mock) if given, else a
# throwaway localstripe from .venv on a free port (58420 upward), exported as
# LOCALSTRIPE_URL and stopped on exit like the others.
# Podman, for the node agent's container runtime test: installed with runc (apt-get, as root)
# where missing; where it cannot be, that test is skipped and says why.
# Chromium, for the console's browser tests: Debian's package (apt-get, as root) where missing.
# Caddy, for the web gateway's tests: Debian's package (apt-get, as root) where missing.
# OpenSSH (server and client) and nss_wrapper, for the runs' sshd and jump host tests (issue 32):
# apt-get, as root, where missing; where they cannot be, those tests are skipped saying why.
# One line per service on stderr tells which one is used.
#
# CMD runs in the foreground: Ctrl-C, or a signal sent to the whole process
# group (make, CI runners, timeout), reaches CMD and then this script cleans
# up. A signal sent to this script's PID alone takes effect (cleanup, exit
# 128+N) only once CMD has exited; bash defers traps until then.
#
# Environment knobs (all optional):
#   NEOCLOUD_PG_DEFAULT_PORT     port probed in step 2 for PostgreSQL (5432)
#   NEOCLOUD_REDIS_DEFAULT_PORT  port probed in step 2 for Redis (6379)
#   NEOCLOUD_PG_OS_USER          OS user for a throwaway PostgreSQL when root
#   (Pointing the two *_DEFAULT_PORT at unused ports, with DATABASE_URL and
#   REDIS_URL unset, simulates a machine where nothing is running.)
#
# Reachability is checked with psql / redis-cli when installed, else with the
# project's venv Python (.venv/bin/python, which has psycopg and redis).

set -euo pipefail

REPO_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly PG_DEFAULT_PORT="${NEOCLOUD_PG_DEFAULT_PORT:-5432}"
readonly REDIS_DEFAULT_PORT="${NEOCLOUD_REDIS_DEFAULT_PORT:-6379}"
readonly STARTUP_TIMEOUT=30   # seconds, per server

if [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then
    PYTHON="$REPO_ROOT/.venv/bin/python"
else
    PYTHON="$(command -v python3 || true)"
fi

# State of the throwaway servers, read by cleanup().
PG_TMP="" PG_BIN="" PG_STARTED=0 PG_RUN_AS=""
REDIS_TMP="" REDIS_PID=""
STRIPE_TMP="" STRIPE_PID=""

log() { printf 'with-services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [[ "$(id -u)" == 0 ]]; }

# Run "$@" with a time limit when coreutils' timeout is available.
with_timeout() {
    local secs=$1; shift
    if have timeout; then timeout "$secs" "$@"; else "$@"; fi
}

# ---------------------------------------------------------------- checks

# pg_url_with_db URL DB: the same URL with its database path replaced by DB.
pg_url_with_db() {
    local url=$1 db=$2 query="" rest
    if [[ "$url" == *\?* ]]; then query="?${url#*\?}"; url="${url%%\?*}"; fi
    rest="${url#*://}"
    printf '%s://%s/%s%s' "${url%%://*}" "${rest%%/*}" "$db" "$query"
}

# url_hostport URL: "host:port" part of a URL (credentials stripped), for logs.
url_hostport() {
    local rest="${1#*://}"
    rest="${rest%%/*}"; rest="${rest%%\?*}"
    printf '%s' "${rest##*@}"
}

# pg_connects URL: 0 if "select 1" succeeds on exactly that database.
pg_connects() {
    # libpq only knows these two schemes; dj-database-url knows a few more.
    local url="postgresql://${1#*://}"
    if have psql; then
        PGCONNECT_TIMEOUT=3 with_timeout 10 \
            psql -X -w -q -At -d "$url" -c 'select 1' >/dev/null 2>&1
    elif [[ -n "$PYTHON" ]]; then
        with_timeout 10 "$PYTHON" - "$url" >/dev/null 2>&1 <<'EOF'
import sys, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=3) as conn:
    conn.execute("select 1")
EOF
    else
        return 1
    fi
}

# pg_reachable URL: the server answers, on the URL's database or, since that
# may not exist yet, on the "postgres" maintenance database Django falls to.
pg_reachable() {
    pg_connects "$1" || pg_connects "$(pg_url_with_db "$1" postgres)"
}

# redis_reachable URL: 0 if the server answers PING (on the URL's db).
redis_reachable() {
    local url=$1
    if have redis-cli; then
        [[ "$(with_timeout 5 redis-cli -u "$url" ping 2>/dev/null)" == PONG ]]
    elif [[ -n "$PYTHON" ]]; then
        with_timeout 10 "$PYTHON" - "$url" >/dev/null 2>&1 <<'EOF'
import sys, redis
r = redis.Redis.from_url(sys.argv[1], socket_connect_timeout=3, socket_timeout=3)
sys.exit(0 if r.ping() else 1)
EOF
    else
        return 1
    fi
}

# port_free PORT: 0 if nothing can be listening on 127.0.0.1:PORT.
port_free() {
    if [[ -n "$PYTHON" ]]; then
        "$PYTHON" -c 'import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
    else
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 1; fi
    fi
}

# free_port START: print the first free port in START..START+199.
free_port() {
    local port
    for ((port = $1; port < $1 + 200; port++)); do
        if port_free "$port"; then echo "$port"; return 0; fi
    done
    die "no free TCP port in $1..$(($1 + 199))"
}

# apt_install PKG...: install packages if we are root on a Debian-like system.
apt_install() {
    is_root && have apt-get || return 1
    log "installing $* with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "$@" >&2 \
        || { apt-get update -q >&2 && apt-get install -y -q "$@" >&2; }
}

# ---------------------------------------------------------------- PostgreSQL

# find_pg_bin: print the directory holding initdb and pg_ctl, highest version.
find_pg_bin() {
    local dir
    for dir in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -rV) \
               "$(dirname -- "$(command -v initdb 2>/dev/null || echo /nonexistent/x)")"; do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then echo "$dir"; return 0; fi
    done
    return 1
}

# as_pg_user CMD...: run CMD as the user owning the throwaway cluster, from a
# directory that user can enter.
as_pg_user() {
    if [[ -z "$PG_RUN_AS" ]]; then
        (cd "$PG_TMP" && "$@")
    elif have runuser; then
        (cd "$PG_TMP" && runuser -u "$PG_RUN_AS" -- "$@")
    else
        (cd "$PG_TMP" && su -s /bin/sh "$PG_RUN_AS" -c "$(printf '%q ' "$@")")
    fi
}

start_postgres() {
    PG_BIN="$(find_pg_bin)" \
        || { apt_install postgresql && PG_BIN="$(find_pg_bin)"; } \
        || die "PostgreSQL server binaries (initdb, pg_ctl) not found; install the 'postgresql' package"

    PG_TMP="$(mktemp -d "${TMPDIR:-/tmp}/with-services-pg.XXXXXX")"
    if is_root; then
        PG_RUN_AS="${NEOCLOUD_PG_OS_USER:-}"
        if [[ -z "$PG_RUN_AS" ]]; then
            if id postgres >/dev/null 2>&1; then PG_RUN_AS=postgres; else PG_RUN_AS=nobody; fi
        fi
        id "$PG_RUN_AS" >/dev/null 2>&1 || die "user '$PG_RUN_AS' does not exist"
        chown "$PG_RUN_AS" "$PG_TMP"
        as_pg_user test -w "$PG_TMP" \
            || die "user '$PG_RUN_AS' cannot use $PG_TMP (check TMPDIR permissions)"
    fi

    local locale=C
    if locale -a 2>/dev/null | grep -Eqix 'c\.utf-?8'; then locale=C.UTF-8; fi
    as_pg_user "$PG_BIN/initdb" -D "$PG_TMP/data" -U postgres --auth=trust \
        --encoding=UTF8 --locale="$locale" --no-sync >"$PG_TMP/initdb.log" 2>&1 \
        || { cat "$PG_TMP/initdb.log" >&2; die "initdb failed"; }

    # Retry on a new port if another process grabbed ours in the meantime.
    local port=55432 _
    for _ in 1 2 3; do
        port="$(free_port "$port")"
        if as_pg_user "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/postgres.log" \
                -w -t "$STARTUP_TIMEOUT" -o "-p $port -k '$PG_TMP' \
                -c listen_addresses=127.0.0.1 -c fsync=off \
                -c synchronous_commit=off -c full_page_writes=off" \
                start >/dev/null; then
            PG_STARTED=1
            break
        fi
        port=$((port + 1))
    done
    if [[ "$PG_STARTED" != 1 ]]; then
        tail -n 20 "$PG_TMP/postgres.log" >&2 2>/dev/null || true
        die "could not start a throwaway PostgreSQL"
    fi

    DATABASE_URL="postgres://postgres@127.0.0.1:$port/neocloud"
    pg_reachable "$DATABASE_URL" || die "throwaway PostgreSQL on port $port does not answer"
    log "PostgreSQL at 127.0.0.1:$port (throwaway, started${PG_RUN_AS:+ as user $PG_RUN_AS})"
}

# shellcheck disable=SC2329  # called from cleanup()
stop_postgres() {
    [[ "$PG_STARTED" == 1 ]] || return 0
    as_pg_user "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m fast -w -t 30 stop >/dev/null 2>&1 \
        || as_pg_user "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate -w stop >/dev/null 2>&1 \
        || log "warning: could not stop the throwaway PostgreSQL in $PG_TMP"
    PG_STARTED=0
}

setup_postgres() {
    if [[ -n "${DATABASE_URL:-}" ]]; then
        if pg_reachable "$DATABASE_URL"; then
            log "PostgreSQL at $(url_hostport "$DATABASE_URL") (from DATABASE_URL)"
            return
        fi
        log "DATABASE_URL is set but not reachable; ignoring it"
    fi
    local url="postgres://postgres@127.0.0.1:$PG_DEFAULT_PORT/neocloud"
    if pg_reachable "$url"; then
        DATABASE_URL="$url"
        log "PostgreSQL at 127.0.0.1:$PG_DEFAULT_PORT (already running)"
        return
    fi
    start_postgres
}

# ---------------------------------------------------------------- Redis

start_redis() {
    local server
    server="$(command -v redis-server)" \
        || { apt_install redis-server && server="$(command -v redis-server)"; } \
        || die "redis-server not found; install the 'redis-server' package"

    REDIS_TMP="$(mktemp -d "${TMPDIR:-/tmp}/with-services-redis.XXXXXX")"
    # Run in the background rather than with --daemonize, so that we know its
    # PID at once and notice right away if it dies (e.g. port taken).
    local port=56379 _ waited
    for _ in 1 2 3; do
        port="$(free_port "$port")"
        "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
            --daemonize no --dir "$REDIS_TMP" --logfile "$REDIS_TMP/redis.log" \
            </dev/null >"$REDIS_TMP/redis.out" 2>&1 &
        REDIS_PID=$!
        for ((waited = 0; waited < STARTUP_TIMEOUT * 5; waited++)); do
            kill -0 "$REDIS_PID" 2>/dev/null || break
            if redis_reachable "redis://127.0.0.1:$port/15"; then
                REDIS_URL="redis://127.0.0.1:$port/15"
                log "Redis at 127.0.0.1:$port (throwaway, started)"
                return
            fi
            sleep 0.2
        done
        stop_redis
        port=$((port + 1))
    done
    tail -n 20 "$REDIS_TMP/redis.out" "$REDIS_TMP/redis.log" >&2 2>/dev/null || true
    die "could not start a throwaway Redis"
}

stop_redis() {
    [[ -n "$REDIS_PID" ]] || return 0
    kill "$REDIS_PID" 2>/dev/null || true
    local i
    for ((i = 0; i < 50; i++)); do
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.2
    done
    kill -9 "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=""
}

setup_redis() {
    if [[ -n "${REDIS_URL:-}" ]]; then
        if redis_reachable "$REDIS_URL"; then
            log "Redis at $(url_hostport "$REDIS_URL") (from REDIS_URL)"
            return
        fi
        log "REDIS_URL is set but not reachable; ignoring it"
    fi
    local url="redis://127.0.0.1:$REDIS_DEFAULT_PORT/15"
    if redis_reachable "$url"; then
        REDIS_URL="$url"
        log "Redis at 127.0.0.1:$REDIS_DEFAULT_PORT (already running)"
        return
    fi
    start_redis
}

# ---------------------------------------------------------------- Stripe

# http_answers URL: 0 if something answers HTTP there (any status).
http_answers() {
    [[ -n "$PYTHON" ]] || return 1
    with_timeout 5 "$PYTHON" - "$1" >/dev/null 2>&1 <<'EOF'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError:
    pass
EOF
}

# The billing tests talk to a local Stripe: stripe-mock when STRIPE_MOCK_URL is given,
# else a throwaway localstripe (a dev dependency, in the venv) exported as LOCALSTRIPE_URL.
setup_stripe() {
    if [[ -n "${STRIPE_MOCK_URL:-}" ]]; then
        log "Stripe mock at ${STRIPE_MOCK_URL} (from STRIPE_MOCK_URL)"
        return
    fi
    local server="$REPO_ROOT/.venv/bin/localstripe"
    if [[ ! -x "$server" ]]; then
        log "localstripe is not installed in .venv; the Stripe tests will be skipped"
        return
    fi
    STRIPE_TMP="$(mktemp -d "${TMPDIR:-/tmp}/with-services-stripe.XXXXXX")"
    local port=58420 _ waited
    for _ in 1 2 3; do
        port="$(free_port "$port")"
        (cd "$STRIPE_TMP" && exec "$server" --port "$port" --from-scratch) \
            </dev/null >"$STRIPE_TMP/localstripe.log" 2>&1 &
        STRIPE_PID=$!
        for ((waited = 0; waited < STARTUP_TIMEOUT * 5; waited++)); do
            kill -0 "$STRIPE_PID" 2>/dev/null || break
            if http_answers "http://127.0.0.1:$port/v1/customers"; then
                LOCALSTRIPE_URL="http://127.0.0.1:$port"
                export LOCALSTRIPE_URL
                log "localstripe at 127.0.0.1:$port (throwaway, started)"
                return
            fi
            sleep 0.2
        done
        stop_stripe
        port=$((port + 1))
    done
    tail -n 20 "$STRIPE_TMP/localstripe.log" >&2 2>/dev/null || true
    die "could not start localstripe"
}

stop_stripe() {
    [[ -n "$STRIPE_PID" ]] || return 0
    kill "$STRIPE_PID" 2>/dev/null || true
    wait "$STRIPE_PID" 2>/dev/null || true
    STRIPE_PID=""
}

# ---------------------------------------------------------------- podman

setup_podman() {
    if have podman && have runc; then
        log "podman: $(command -v podman) (runc: $(command -v runc))"
    elif apt_install podman runc; then
        log "podman: installed"
    else
        log "podman: not available (the container runtime's run test will be skipped)"
    fi
}

# ---------------------------------------------------------------- openssh (issue 32)

setup_openssh() {
    if [[ -x /usr/sbin/sshd ]] && have ssh && [[ -e /usr/lib/x86_64-linux-gnu/libnss_wrapper.so ]]; then
        log "openssh: /usr/sbin/sshd, $(command -v ssh)"
    elif apt_install openssh-server openssh-client libnss-wrapper; then
        log "openssh: installed"
    else
        log "openssh: not available (the SSH tests will be skipped)"
    fi
}

# ---------------------------------------------------------------- chromium

setup_chromium() {
    if have chromium; then
        log "chromium: $(command -v chromium)"
    elif apt_install chromium; then
        log "chromium: installed"
    else
        log "chromium: not available (the console's browser tests will be skipped)"
    fi
}

# ---------------------------------------------------------------- caddy

setup_caddy() {
    if have caddy; then
        log "caddy: $(command -v caddy)"
    elif apt_install caddy; then
        log "caddy: installed (Debian's caddy)"
    else
        log "caddy: not available (the web gateway's tests will be skipped)"
    fi
}

# ---------------------------------------------------------------- promtool

setup_promtool() {
    if have promtool; then
        log "promtool: $(command -v promtool)"
    elif apt_install prometheus; then
        log "promtool: installed (Debian's prometheus)"
    else
        log "promtool: not available (the alert rules' and scrape config's checks will be skipped)"
    fi
}

# ---------------------------------------------------------------- main

# shellcheck disable=SC2329  # invoked by the EXIT trap
cleanup() {
    local rc=$?
    set +e
    stop_stripe
    stop_redis
    stop_postgres
    [[ -n "$REDIS_TMP" ]] && rm -rf -- "$REDIS_TMP"
    [[ -n "$PG_TMP" ]] && rm -rf -- "$PG_TMP"
    [[ -n "$STRIPE_TMP" ]] && rm -rf -- "$STRIPE_TMP"
    exit "$rc"
}
trap cleanup EXIT
# A signal ends the script (running the EXIT trap) with the usual 128+N status.
# CMD runs in the foreground, so a terminal's Ctrl-C reaches it as well.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

(($# > 0)) || die "usage: $0 CMD [ARGS...]"

setup_postgres
setup_redis
setup_stripe
setup_podman
setup_openssh
setup_chromium
setup_caddy
setup_promtool
export DATABASE_URL REDIS_URL

status=0
"$@" || status=$?
exit "$status"
