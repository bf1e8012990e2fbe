#!/usr/bin/env bash
# Installs the Debian packages the tests, benchmarks and demo need, once. Idempotent: only missing
# packages are installed, and `apt-get update` runs only when something is missing. --k8s adds
# what the single-node cluster of hack/k8s/ needs (containerd, CNI plugins, ...); --demo installs
# only what `make demo` needs.
. "$(dirname "$0")/lib.sh"
missing=()
want=$APT_PACKAGES
[ "${1:-}" = --k8s ] && want="$want $K1N_APT_PACKAGES"
[ "${1:-}" = --demo ] && want=$DEMO_APT_PACKAGES
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
log "installing Debian packages: ${missing[*]}"
$SUDO apt-get update -qq
# The tests run PostgreSQL servers of their own (internal/testenv): the package need not create and
# start a cluster of its own on 5432 (postgresql-common's createcluster.d, read at install).
if [[ " ${missing[*]} " == *" postgresql "* ]] && [ ! -d /var/lib/postgresql ]; then
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/50-sless-no-main-cluster.conf >/dev/null
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
# Likewise RabbitMQ: internal/testenv runs private nodes on free ports with their own epmd. Where
# the package's postinst started its system broker (5672, 25672) or Erlang's epmd (4369), stop it
# and keep it from starting at boot. Without systemd, Debian's invoke-rc.d policy usually kept the
# broker from starting; `service ... stop` would run rabbitmqctl, which itself starts an epmd.
if [[ " ${missing[*]} " == *" rabbitmq-server "* ]]; then
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now rabbitmq-server.service epmd.socket epmd.service >/dev/null 2>&1 || true
  elif pgrep -u rabbitmq -x beam.smp >/dev/null; then
    $SUDO service rabbitmq-server stop >/dev/null 2>&1 || true
  fi
  # An epmd the package's scripts started as its rabbitmq user (rabbitmqctl starts one if none runs).
  pids=$(pgrep -u rabbitmq -x epmd || true)
  [ -z "$pids" ] || $SUDO kill $pids || true
fi
