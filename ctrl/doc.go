// Package ctrl is the control plane behind `softfabric up/down/status` and
// the connection set-up of perf and pingpong: device facts read with
// netlink, RoCEv2 GIDs, next-hop resolution through the kernel's route and
// neighbour tables, the state and lock files under /run/softfabric, and the
// bpffs directory for pins.
//
// Functions that talk to the kernel act in the network namespace of the
// calling thread; a caller that switched namespaces must have locked its
// goroutine to the thread (netnstest.Host.Do does).
package ctrl
