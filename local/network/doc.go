// Package network owns the networks of one single-host sless instance and their confinement: two
// podman (CNI) bridge networks of its own — functions, jobs and cron runs on one, dependency
// installs on the other — on a subnet that overlaps no route of the machine (never podman's
// default 10.88.0.0/16), with IPv6 off on the bridges (and, through podman.NoIPv6, in every
// container); the mangle chains that let new connections from them reach only the outside (not
// the host, another container, a private, shared or metadata range or another bridge's subnet,
// judged before and after DNAT; installs reach nothing but the index proxy at their gateway),
// capped per container; each function, job and cron container's namespace rule (the outside or
// nothing, and allowed destinations), known by the MAC address the runner registers before the
// container exists, and nothing for a container it did not register; the ip6tables chain that
// drops all IPv6 from the bridges; switching to a new generation of the chains in one
// transaction; and Ensure, which checks all of it and puts back what is missing before every
// container start and every few seconds.
package network
