// Package ctrl will hold the control plane: netlink (links, XDP attach,
// addresses, neighbours), connection management, and the daemon behind
// `softfabric up`. Not built yet.
package ctrl
