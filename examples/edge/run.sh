#!/usr/bin/env bash
# Starts the edge example on loopback: Redis, two Tidegate nodes that trust
# the proxy (node.trusted_proxies = ["127.0.0.1"]), and nginx in front of
# them; then runs demo.mjs, which floods the edge from one address and
# shows the broker's per-IP cap acting on the real client address behind
# it. Everything started here is stopped by PID on exit.
#
#   examples/edge/run.sh            (from anywhere; TIDEGATE_BIN to choose the binary)
#   KEEP=1 examples/edge/run.sh     (leave it running until Ctrl-C, to try it)
#
# nginx comes from Debian's package, installed here when missing; Node and
# client-sdk-ts's dev dependencies (`npm ci`) run the demo client.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BIN="${TIDEGATE_BIN:-$ROOT/target/release/tidegate}"
[ -x "$BIN" ] || { echo "edge: no broker at $BIN; run cargo build --release -p tidegate" >&2; exit 1; }
[ -d "$ROOT/client-sdk-ts/node_modules/ws" ] || { echo "edge: run npm ci in client-sdk-ts first" >&2; exit 1; }

NGINX="$(command -v nginx || true)"
[ -n "$NGINX" ] || { [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx; } || true
if [ -z "$NGINX" ]; then
  echo "edge: nginx is missing; installing Debian's nginx" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null \
    || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null; }
  NGINX=/usr/sbin/nginx
fi

# Edge limits (per client address) and the broker's per-IP socket cap.
RATE="${EDGE_RATE:-5}"
BURST="${EDGE_BURST:-10}"
MAX_CONN="${EDGE_MAX_CONN:-20}"
IP_CAP="${BROKER_IP_CAP:-3}"
FLOOD="${FLOOD:-60}"

DIR="$(mktemp -d /tmp/tidegate-edge.XXXXXX)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for <file> <pattern> <what>
  for _ in $(seq 1 150); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "edge: $3 did not start:" >&2; cat "$1" >&2; exit 1
}

REDIS_PORT="$(free_port)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$DIR" >"$DIR/redis.log" 2>&1 &
PIDS+=($!)
wait_for "$DIR/redis.log" "Ready to accept connections" "redis-server"

# Behind a proxy the public sample secret and API key are refused (a proxy
# forwards other machines' requests): this run's own, shared by both nodes,
# plus the secret that signs the nodes' control messages.
JWT_SECRET="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
CLUSTER_SECRET="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
API_KEY="edge-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

UPSTREAMS=""
NODE_PORTS=()
for id in edge-a edge-b; do
  port="$(free_port)"
  cp "$ROOT/config.toml" "$DIR/$id.toml"
  # The shipped config plus what the edge deployment changes.
  python3 - "$DIR/$id.toml" "$id" "$port" "$REDIS_PORT" "$IP_CAP" "$JWT_SECRET" "$CLUSTER_SECRET" "$API_KEY" <<'PY'
import re, sys
path, node_id, port, redis_port, cap, jwt_secret, cluster_secret, api_key = sys.argv[1:]
text = open(path).read()
text = text.replace('key = "tidegate-sample-publish-key"', 'key = "%s"' % api_key)
def set_key(text, section, key, value):
    pattern = re.compile(r"(^\[%s\]\n(?:(?!^\[).*\n)*?)^%s\s*=.*$" % (re.escape(section), key), re.M)
    if pattern.search(text):
        return pattern.sub(lambda m: m.group(1) + "%s = %s" % (key, value), text, count=1)
    head = re.compile(r"^\[%s\]\n" % re.escape(section), re.M)
    if head.search(text):
        return head.sub(lambda m: m.group(0) + "%s = %s\n" % (key, value), text, count=1)
    return text + "\n[%s]\n%s = %s\n" % (section, key, value)
for section, key, value in [
    ("node", "id", '"%s"' % node_id),
    ("node", "listen", '"127.0.0.1:%s"' % port),
    ("grpc", "listen", '"127.0.0.1:0"'),
    ("node", "trusted_proxies", '["127.0.0.1"]'),
    ("cluster", "mode", '"redis"'),
    ("cluster", "redis_url", '"redis://127.0.0.1:%s/"' % redis_port),
    ("cluster", "secret", '"%s"' % cluster_secret),
    ("auth", "jwt_secret", '"%s"' % jwt_secret),
    ("handshake", "ip_max_open", cap),
]:
    text = set_key(text, section, key, value)
open(path, "w").write(text)
PY
  RUST_LOG=warn "$BIN" serve --config "$DIR/$id.toml" >"$DIR/$id.out" 2>"$DIR/$id.log" &
  PIDS+=($!)
  wait_for "$DIR/$id.out" "tidegate listening" "node $id"
  UPSTREAMS+="        server 127.0.0.1:$port;"$'\n'
  NODE_PORTS+=("$port")
done

EDGE_PORT="$(free_port)"
python3 - "$HERE/nginx.conf.template" "$DIR/nginx.conf" <<PY
import sys
src, dst = sys.argv[1:]
text = open(src).read()
for k, v in {"DIR": "$DIR", "PORT": "$EDGE_PORT", "RATE": "$RATE", "BURST": "$BURST", "MAX_CONN": "$MAX_CONN", "UPSTREAMS": """$UPSTREAMS""".rstrip("\n")}.items():
    text = text.replace("@%s@" % k, v)
open(dst, "w").write(text)
PY
"$NGINX" -t -q -c "$DIR/nginx.conf" -p "$DIR" 2>"$DIR/nginx-test.log" || { cat "$DIR/nginx-test.log" >&2; exit 1; }
"$NGINX" -c "$DIR/nginx.conf" -p "$DIR" 2>"$DIR/nginx.log" &
PIDS+=($!)
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$EDGE_PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$EDGE_PORT/healthz" >/dev/null || { echo "edge: nginx does not answer" >&2; cat "$DIR/error.log" >&2; exit 1; }
echo "edge: nginx on http://127.0.0.1:$EDGE_PORT in front of two nodes (per-IP: $RATE upgrades/s, burst $BURST, $MAX_CONN sockets at the edge; $IP_CAP sockets per IP per node at the broker)"

FLOOD_TOKEN="$("$BIN" token --config "$DIR/edge-a.toml" --account flooder --sub 'doc:*')"
CLIENT_TOKEN="$("$BIN" token --config "$DIR/edge-a.toml" --account client --sub 'doc:*')"
status=0
node "$HERE/demo.mjs" "http://127.0.0.1:$EDGE_PORT" "$FLOOD_TOKEN" "$CLIENT_TOKEN" "$FLOOD" "$IP_CAP" || status=$?
seen=0
for port in "${NODE_PORTS[@]}"; do
  n="$(curl -fsS "http://127.0.0.1:$port/metrics" | awk '/^tidegate_connections_opened_total /{print $2}')"
  seen=$((seen + ${n:-0}))
done
echo "edge: of $FLOOD + $((IP_CAP + 2)) upgrade attempts, the nodes accepted $seen sockets; the rest never cost them more than one refusal"
if [ "${KEEP:-0}" = 1 ]; then
  echo "edge: running; Ctrl-C to stop"
  wait
fi
exit $status
