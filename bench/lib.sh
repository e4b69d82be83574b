# Shell helpers the bench scripts source: ports, waiting for a server,
# stopping the one a script started, and a one-node bolided config with a
# RESP port.
#
#   . "$(dirname "$0")/lib.sh"

# A port free on 127.0.0.1 at the moment of asking.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to 10 s for something to listen on 127.0.0.1:$1.
wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "$(basename "$0"): nothing listens on port $1" >&2
  exit 1
}

# The server this script started ($pid), stopped by its PID.
pid=""
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; fi; }

# resp_config FILE CLUSTER_NAME SERVICE_PORT REDIS_PORT DATA_SIZE [SERVICE_THREADS]:
# one node, namespace test (RF 1, in memory), a RESP port.
resp_config() {
  local threads=""
  [ -n "${6:-}" ] && threads="    service-threads $6"
  cat > "$1" <<CONF
service {
    cluster-name $2
$threads
}
network {
    service {
        address 127.0.0.1
        port $3
    }
    redis {
        port $4
    }
}
namespace test {
    replication-factor 1
    storage-engine memory {
        data-size $5
    }
}
CONF
}
