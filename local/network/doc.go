// Package network owns the networks of one single-host sless instance: two podman (CNI) bridge
// networks of its own — functions, jobs and cron runs on one, dependency installs on the other —
// on a subnet that overlaps no route of the machine (never podman's default 10.88.0.0/16), and
// the iptables chain that confines them: no connection to any address of the host (whatever a
// service listens on: 127.0.0.1 is the container's own, 0.0.0.0 is reached through the gateway or
// the node's address), to another container, or to the link-local metadata range; installs reach
// nothing but the index proxy at their gateway. Functions' other outbound traffic is masqueraded
// out as usual.
package network
