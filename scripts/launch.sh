#!/usr/bin/env bash
# launch.sh: a real fleet behind kvroute. Starts NUM_WORKERS vLLM workers with prefix caching and ZMQ KV events
# (replay included), waits until each answers GET /health, then starts `kvroute frontend` with one --worker flag
# per worker. Ctrl-C, SIGTERM, or the exit of any child stops every process group it started.
#
#   scripts/launch.sh                                   # two workers on GPUs 0 and 1, frontend on :8000
#   SINGLE_GPU=1 GPU_MEMORY_UTILIZATION=0.4 scripts/launch.sh
#   VLLM_CMD="./bin/kvroute mocker" MODEL=testdata/models/Qwen3-VL-2B-Instruct scripts/launch.sh   # no GPU
#   NUM_WORKERS=4 PREFILL_WORKERS=2 scripts/launch.sh  # disaggregated: workers 1-2 prefill, 3-4 decode (NIXL)
#
# Environment (default in brackets):
#   MODEL                   model for the workers and the frontend's tokenizer: an HF hub name or a local
#                           HF-layout directory [Qwen/Qwen3-VL-2B-Instruct]
#   SERVED_MODEL_NAME       the name clients put in "model"; given to the workers (--served-model-name) and the
#                           frontend (--model-name) alike [$MODEL, vLLM's default]
#   NUM_WORKERS             workers to start, ids 1..NUM_WORKERS [2]
#   PREFILL_WORKERS         disaggregated prefill/decode: workers 1..PREFILL_WORKERS register with role=prefill,
#                           the rest with role=decode, and every worker gets --kv-transfer-config
#                           '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' (vLLM's NIXL KV transfer);
#                           0 is an aggregated fleet [0]
#   NIXL_SIDE_CHANNEL_PORT_BASE  with PREFILL_WORKERS: worker i's VLLM_NIXL_SIDE_CHANNEL_PORT (the handshake
#                           port decode workers reach prefill workers on) is this + i - 1 [5600]
#   BLOCK_SIZE              KV block size in tokens: workers' --block-size and the frontend's
#                           --kv-cache-block-size, which must agree [16]
#   GPU_MEMORY_UTILIZATION  each worker's --gpu-memory-utilization; empty: vLLM's default (0.9), or 0.9/NUM_WORKERS
#                           when SINGLE_GPU=1 []
#   SINGLE_GPU              1 (or true): every worker runs on GPU 0 (CUDA_VISIBLE_DEVICES=0) and they start one after the
#                           other, so each vLLM profiles memory alone; otherwise worker i gets
#                           CUDA_VISIBLE_DEVICES=i-1 and all start at once [0]
#   HTTP_PORT_BASE          worker i serves HTTP on HTTP_PORT_BASE + i - 1 [8101]
#   KV_EVENTS_PORT_BASE     worker i publishes KV events (ZMQ PUB) on KV_EVENTS_PORT_BASE + i - 1 [5557]
#   KV_REPLAY_PORT_BASE     worker i answers replay requests (ZMQ ROUTER) on KV_REPLAY_PORT_BASE + i - 1
#                           [KV_EVENTS_PORT_BASE + 100]
#   WORKER_HOST             the workers' HTTP --host; the frontend reaches the workers there (127.0.0.1 when it
#                           is 0.0.0.0). The ZMQ endpoints are always tcp://*:PORT: vLLM binds its PUB socket
#                           only when the endpoint has a "*" (it connects otherwise) [127.0.0.1]
#   FRONTEND_PORT           the frontend's --http-port [8000]
#   FRONTEND_HOST           the frontend's listen address [0.0.0.0]
#   FRONTEND_EXTRA_ARGS     more `kvroute frontend` flags, e.g. "--router-temperature 0.5" (shell-quoted) []
#   VLLM_CMD                the worker command, split on spaces, followed by MODEL and the vLLM flags; the
#                           simulated worker `kvroute mocker` accepts the same flags [vllm serve]
#   VLLM_EXTRA_ARGS         more worker flags, e.g. "--max-model-len 8192 --enforce-eager" (shell-quoted) []
#   KVROUTE                 the kvroute binary [kvroute on PATH, else bin/kvroute of this repository]
#   HEALTH_TIMEOUT          seconds to wait for each worker's and the frontend's GET /health [600]
#   STOP_TIMEOUT            seconds between SIGTERM and SIGKILL when stopping [15]
#   LOG_DIR                 when set, worker i logs to LOG_DIR/worker-i.log and the frontend to
#                           LOG_DIR/frontend.log instead of this terminal []
#
# Every child runs in its own process group (vLLM's engine-core processes included), so stopping a group stops
# all of a worker. Exit status: the dead child's status, or 128 + signal number after Ctrl-C / SIGTERM.
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen3-VL-2B-Instruct}
SERVED_MODEL_NAME=${SERVED_MODEL_NAME:-$MODEL}
NUM_WORKERS=${NUM_WORKERS:-2}
PREFILL_WORKERS=${PREFILL_WORKERS:-0}
NIXL_SIDE_CHANNEL_PORT_BASE=${NIXL_SIDE_CHANNEL_PORT_BASE:-5600}
BLOCK_SIZE=${BLOCK_SIZE:-16}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-}
SINGLE_GPU=${SINGLE_GPU:-0}
case ${SINGLE_GPU,,} in # the seed scripts write true/false
1 | true | yes | on) SINGLE_GPU=1 ;;
*) SINGLE_GPU=0 ;;
esac
HTTP_PORT_BASE=${HTTP_PORT_BASE:-8101}
KV_EVENTS_PORT_BASE=${KV_EVENTS_PORT_BASE:-5557}
KV_REPLAY_PORT_BASE=${KV_REPLAY_PORT_BASE:-$((KV_EVENTS_PORT_BASE + 100))}
WORKER_HOST=${WORKER_HOST:-127.0.0.1}
FRONTEND_PORT=${FRONTEND_PORT:-8000}
FRONTEND_HOST=${FRONTEND_HOST:-0.0.0.0}
FRONTEND_EXTRA_ARGS=${FRONTEND_EXTRA_ARGS:-}
VLLM_CMD=${VLLM_CMD:-vllm serve}
VLLM_EXTRA_ARGS=${VLLM_EXTRA_ARGS:-}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-600}
STOP_TIMEOUT=${STOP_TIMEOUT:-15}
LOG_DIR=${LOG_DIR:-}

log() { printf 'launch: %s\n' "$*" >&2; }
die() { log "$*"; exit 2; }

for v in NUM_WORKERS PREFILL_WORKERS NIXL_SIDE_CHANNEL_PORT_BASE BLOCK_SIZE HTTP_PORT_BASE KV_EVENTS_PORT_BASE KV_REPLAY_PORT_BASE FRONTEND_PORT \
	HEALTH_TIMEOUT STOP_TIMEOUT; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
((NUM_WORKERS >= 1)) || die "NUM_WORKERS must be at least 1"
((PREFILL_WORKERS == 0 || PREFILL_WORKERS < NUM_WORKERS)) ||
	die "PREFILL_WORKERS ($PREFILL_WORKERS) must leave at least one of the $NUM_WORKERS workers to decode"

if [[ -z ${KVROUTE:-} ]]; then
	if command -v kvroute >/dev/null 2>&1; then
		KVROUTE=kvroute
	else
		KVROUTE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bin/kvroute"
	fi
fi
command -v "$KVROUTE" >/dev/null 2>&1 || die "kvroute binary '$KVROUTE' not found (make build, or set KVROUTE)"

read -ra vllm_cmd <<<"$VLLM_CMD"
((${#vllm_cmd[@]} > 0)) || die "VLLM_CMD is empty"
command -v "${vllm_cmd[0]}" >/dev/null 2>&1 || die "worker command '${vllm_cmd[0]}' not found (set VLLM_CMD)"
# Shell-quoted lists of extra flags, so JSON values survive: VLLM_EXTRA_ARGS="--compilation-config '{\"level\":0}'".
eval "vllm_extra=($VLLM_EXTRA_ARGS)"
eval "frontend_extra=($FRONTEND_EXTRA_ARGS)"

if [[ -z $GPU_MEMORY_UTILIZATION && $SINGLE_GPU == 1 && $NUM_WORKERS -gt 1 ]]; then
	GPU_MEMORY_UTILIZATION=$(printf '0.%02d' $((90 / NUM_WORKERS)))
fi

connect_host=$WORKER_HOST
[[ $WORKER_HOST == 0.0.0.0 ]] && connect_host=127.0.0.1

pids=()   # every child's pid, which is also its process group id (see start)
names=()  # what each pid is, for the log
stopping=0

# stop_all sends SIGTERM to every child's process group, waits up to STOP_TIMEOUT, then SIGKILLs what is left.
stop_all() {
	local i pid deadline
	for pid in "${pids[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null || true
	done
	deadline=$((SECONDS + STOP_TIMEOUT))
	for i in "${!pids[@]}"; do
		pid=${pids[$i]}
		while kill -0 -- "-$pid" 2>/dev/null && ((SECONDS < deadline)); do
			sleep 0.2
		done
		if kill -0 -- "-$pid" 2>/dev/null; then
			log "${names[$i]} (pgid $pid) did not stop in ${STOP_TIMEOUT}s: SIGKILL"
			kill -KILL -- "-$pid" 2>/dev/null || true
		fi
	done
	wait 2>/dev/null || true
}

on_signal() {
	((stopping)) && return
	stopping=1
	log "$1: stopping ${#pids[@]} process group(s)"
	stop_all
	exit $((128 + $2))
}
trap 'on_signal SIGINT 2' INT
trap 'on_signal SIGTERM 15' TERM
trap 'on_signal SIGHUP 1' HUP
trap '((stopping)) || stop_all' EXIT

# quote_words WORD...: the words as a shell would read them back, quoted only where needed, for the log.
quote_words() {
	local w q="'\\''"
	for w; do
		if [[ $w =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
			printf ' %s' "$w"
		else
			printf " '%s'" "${w//\'/$q}"
		fi
	done
}

# start NAME CMD...: runs CMD in the background in its own process group, output to LOG_DIR/NAME.log if set.
# Job control (set -m) is on only while starting a job: it puts the job in a process group of its own, so one kill
# reaches a worker and all its subprocesses; off, foreground commands stay in the script's group and Ctrl-C
# reaches the script (and its trap) rather than a `sleep`.
start() {
	local name=$1
	shift
	[[ -n $LOG_DIR ]] && mkdir -p "$LOG_DIR"
	set -m
	if [[ -n $LOG_DIR ]]; then
		"$@" >"$LOG_DIR/$name.log" 2>&1 &
	else
		"$@" &
	fi
	set +m
	pids+=("$!")
	names+=("$name")
	log "started $name (pid $!):$(quote_words "$@")"
}

# http_ok HOST PORT: GET http://HOST:PORT/health answers 200 (bash's /dev/tcp: no curl needed).
http_ok() {
	local status=
	{
		printf 'GET /health HTTP/1.0\r\nHost: %s:%s\r\n\r\n' "$1" "$2" >&3
		IFS= read -r -t 5 status <&3 || true
	} 2>/dev/null 3<>"/dev/tcp/$1/$2" || return 1
	[[ $status == "HTTP/1."?" 200"* ]]
}

# port_free HOST PORT NAME: fails, saying so, when something already answers on the port: a probe there would
# reach that process instead of ours.
port_free() {
	if { : 3<>"/dev/tcp/$1/$2"; } 2>/dev/null; then
		log "$3: port $2 is already in use by another process"
		return 1
	fi
}

# wait_healthy NAME PID HOST PORT: polls GET /health until 200; fails when the child exits or HEALTH_TIMEOUT
# passes. The port was free before the child started (port_free), and the child must still be alive once the
# probe succeeds, so a 200 is the child's own.
wait_healthy() {
	local name=$1 pid=$2 host=$3 port=$4 deadline=$((SECONDS + HEALTH_TIMEOUT))
	until http_ok "$host" "$port" && kill -0 "$pid" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "$name exited before it was healthy"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			log "$name not healthy on port $port after ${HEALTH_TIMEOUT}s"
			return 1
		fi
		sleep 0.5
	done
	log "$name healthy on port $port"
}

worker_flags=()
worker_pids=()
for ((i = 1; i <= NUM_WORKERS; i++)); do
	port=$((HTTP_PORT_BASE + i - 1))
	events=$((KV_EVENTS_PORT_BASE + i - 1))
	replay=$((KV_REPLAY_PORT_BASE + i - 1))
	kv_config=$(printf '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d"}' \
		"$events" "$replay")
	args=("$MODEL" --served-model-name "$SERVED_MODEL_NAME" --host "$WORKER_HOST" --port "$port"
		--enable-prefix-caching --block-size "$BLOCK_SIZE" --enable-prompt-tokens-details
		--kv-events-config "$kv_config")
	[[ -n $GPU_MEMORY_UTILIZATION ]] && args+=(--gpu-memory-utilization "$GPU_MEMORY_UTILIZATION")
	role=
	if ((PREFILL_WORKERS > 0)); then
		role=",role=decode"
		((i <= PREFILL_WORKERS)) && role=",role=prefill"
		args+=(--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}')
	fi
	gpu=$((i - 1))
	[[ $SINGLE_GPU == 1 ]] && gpu=0
	port_free "$connect_host" "$port" "worker-$i" || exit 1
	CUDA_VISIBLE_DEVICES=$gpu VLLM_NIXL_SIDE_CHANNEL_PORT=$((NIXL_SIDE_CHANNEL_PORT_BASE + i - 1)) \
		start "worker-$i" "${vllm_cmd[@]}" "${args[@]}" "${vllm_extra[@]}"
	worker_pids+=("$!")
	worker_flags+=(--worker "id=$i,url=http://$connect_host:$port,events=tcp://$connect_host:$events,replay=tcp://$connect_host:$replay$role")
	if [[ $SINGLE_GPU == 1 ]]; then
		wait_healthy "worker-$i" "$!" "$connect_host" "$port" || exit 1
	fi
done
if [[ $SINGLE_GPU != 1 ]]; then
	for ((i = 1; i <= NUM_WORKERS; i++)); do
		wait_healthy "worker-$i" "${worker_pids[$((i - 1))]}" "$connect_host" "$((HTTP_PORT_BASE + i - 1))" || exit 1
	done
fi

frontend_host=$FRONTEND_HOST
[[ $FRONTEND_HOST == 0.0.0.0 ]] && frontend_host=127.0.0.1
port_free "$frontend_host" "$FRONTEND_PORT" frontend || exit 1
start frontend "$KVROUTE" frontend --http-port "$FRONTEND_PORT" --http-host "$FRONTEND_HOST" \
	--model-path "$MODEL" --model-name "$SERVED_MODEL_NAME" --kv-cache-block-size "$BLOCK_SIZE" \
	"${worker_flags[@]}" "${frontend_extra[@]}"
wait_healthy frontend "$!" "$frontend_host" "$FRONTEND_PORT" || exit 1
log "ready: curl http://localhost:$FRONTEND_PORT/v1/chat/completions -H 'content-type: application/json'" \
	"-d '{\"model\":\"$SERVED_MODEL_NAME\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'"

# Run until a child exits (wait -n) or a signal arrives (the trap exits).
status=0
wait -n || status=$?
for i in "${!pids[@]}"; do
	if ! kill -0 "${pids[$i]}" 2>/dev/null; then
		log "${names[$i]} exited (status $status): stopping the rest"
		break
	fi
done
stopping=1
stop_all
exit "$status"
