// Package xsk is an AF_XDP socket: a UMEM of fixed-size chunks shared with
// the kernel through four single-producer single-consumer rings (fill, rx,
// tx, completion), exposed as a link.Link for the engine and as zero-copy
// views for its hot path.
//
// A Socket is owned by one goroutine (the worker of its queue): no method is
// safe for concurrent use, except that Close may be called while another
// goroutine is blocked in Wait. Sockets that share a UMEM on the same queue
// also share its fill and completion rings, so they must be driven by the
// same goroutine.
//
// The ring protocol follows the kernel's (include/uapi/linux/if_xdp.h and
// net/xdp/xsk_queue.h): each side owns one index, reads the other side's
// index with a load-acquire and publishes its own with a store-release, and
// keeps a cached copy of the other side's index that it refreshes only when
// the cache says the ring looks empty (consumer) or full (producer). Go's
// sync/atomic operations are sequentially consistent, which is at least as
// strong as acquire/release.
package xsk
