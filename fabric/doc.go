// Package fabric is softfabric's application API: RDMA for Go programs,
// shaped after libfabric, the interface HPC and storage programmers know.
//
// # Objects
//
// GetInfo returns offers (Info) for the hints an application gives: the
// capabilities it needs (CapMsg, CapRMA, CapTagged, CapAtomic), an
// endpoint type, the device (by interface name in Hints.Domain.Name or
// by address in Hints.Node), progress and threading models, sizes. An
// offer opens a Fabric, and the Fabric a Domain: one softfabric device
// (an interface that `softfabric up` prepared) opened by this process,
// with a worker per device queue. On a Domain live the endpoints, the
// completion queues (CQ), counters, address vectors (AV), shared
// receive contexts and memory regions (MR); event queues (EQ) and
// passive endpoints live on the Fabric.
//
// Every object has Close. Closing twice is not an error; closing an
// object with open children fails with ErrBusy.
//
// # Providers
//
// ProviderSoftfabric serves the interfaces prepared with `softfabric up`.
// ProviderMem serves in-process devices on an in-memory switch, each
// named by an address (Hints.Node): several domains of one program talk
// through it, which is how this package's tests and examples run, and
// how an application can test its own code without a NIC.
//
// # Endpoints
//
//   - EPMsg: connected and reliable, on an RC queue pair. A
//     PassiveEndpoint listens; a connection request arrives on its EQ as
//     EventConnReq, whose Info opens the endpoint that Accepts it (or the
//     passive endpoint Rejects it); Connect and Accept carry private
//     data. The exchange is RDMA-CM's, on the wire as rdma_cm peers
//     (rping, MPI, storage stacks) speak it: IB CM MADs on queue pair 1,
//     which every domain runs (a request for a service nobody listens on
//     is rejected at once, as Linux does). OptCM selects the older TCP
//     stand-in instead, which passive endpoints still answer. Private
//     data carries a length byte in front, as libfabric's verbs provider
//     frames it (MaxCMData). A passive endpoint listens through a domain
//     of its fabric open on its device: open the domain first. ConnectQP
//     connects to a peer whose queue pair facts came out of band
//     (rdma-core's tools).
//   - EPDgram: unreliable datagrams on a UD queue pair, up to the path
//     MTU. Peers are AV entries. rdma_cm's UD peers (udaddy) find each
//     other by service ID resolution (SIDR): a passive endpoint opened
//     for a DGRAM offer hears each request as EventConnReq and a DGRAM
//     endpoint opened from its Info Accepts it with its QPN and Q_Key;
//     AV.InsertCM resolves an IP address and port, and sends to the
//     entry use the Q_Key the peer named.
//   - EPRDM: reliable and unconnected: peers are AV entries, and the
//     endpoint makes an RC connection to each on first use (see the
//     comment in rdm.go for the protocol). Messages up to RDMEagerSize,
//     tagged or not, matched in software; RMA and atomics.
//
// An endpoint is opened from an Info, bound to its CQs (FlagSend,
// FlagRecv, FlagSelectiveCompletion), counters, AV and EQ, then enabled.
// A MSG endpoint's counters bound with FlagRemoteWrite or FlagRemoteRead
// count the RDMA writes and reads its peer made into its memory
// (CapRMAEvent); a count seen means the write's bytes are in place, so an
// application may poll a counter where a C one polls the memory.
// Operations take a uint64 context that comes back in their Completion.
// A buffer belongs to the provider from its post until its completion;
// Inject, InjectData, InjectWrite and TInject copy up to InjectSize bytes
// at once and report no completion.
//
// Local buffers must lie in a registered region (MRLocal): register a
// []byte with Domain.RegisterMemory (zero-copy: the transport reads and
// writes the slice itself) and pass the region's Desc with each buffer.
// Remote addresses are virtual addresses (MR.Addr() + offset) under the
// region's Key. Domain.AllocMemory allocates page-aligned memory outside
// the Go heap and registers it; on a device attached to the softfabric
// daemon (MRShared in the domain's MR mode) that memory is shared with
// the daemon, which can place received payloads straight into it: one
// copy fewer than other registered memory.
//
// # Completions
//
// CQ.Read(out) copies up to len(out) completions into the caller's slice
// and returns how many; it never allocates and never blocks.
// CQ.ReadContext waits for at least one: it spins briefly, then parks the
// goroutine on an eventfd through the runtime's poller. A Completion
// carries a Status; Completion.Err returns nil or a preallocated error
// that matches a sentinel with errors.Is (ErrCanceled, ErrTruncated,
// ErrRemoteAccess, ErrTimedOut, ErrNoMsg, ...). Calls that fail return
// sentinels too: ErrAgain when a queue is full (read completions, then
// retry), ErrAddrNotAvail, ErrAccess, ErrInvalid, ErrNotSupported, and on
// the control path the same wrapped with %w.
//
// # Progress and threading
//
// With ProgressAuto (the default) the domain's workers (a goroutine per
// device queue, each running its queue to completion) drive the
// transport; reading a CQ only reads. With ProgressManual there are no
// provider goroutines: reading a CQ (or a counter, or calling
// Domain.Progress) drives the workers of the endpoints bound to it, run
// to completion on the caller's goroutine. That is the lowest-latency
// way, and a goroutine per worker (Domain.Queues, Endpoint.Worker,
// Domain.PinThread) uses every core. A peer using manual progress must
// keep reading its CQs, or its side of the transport stands still.
//
// ThreadSafe (the default): every object may be used from several
// goroutines; posting takes the endpoint's lock, reading the CQ's.
// ThreadDomain: no locks; the objects of a domain are used from one
// goroutine at a time and are not safe for concurrent use.
//
// # Ordering and completion levels
//
// MSG and RDM endpoints keep every ordering between operations to one
// peer (one RC queue pair executes in order). A MSG send completes when
// the peer's transport acknowledged it, which is when its data is in the
// peer's buffer: FlagDeliveryComplete. An RDM send completes when the
// data is in the peer's provider buffer (FlagTransmitComplete), or, asked
// with FlagDeliveryComplete, when the peer matched it into the
// application's buffer. A DGRAM send completes when it left.
//
// # Atomics
//
// Fetch-add and compare-and-swap on one 64-bit integer go on the wire as
// RDMA atomics. On RDM endpoints every other libfabric op and datatype
// is executed at the target by its provider in arrival order;
// AtomicValid says which is which.
package fabric
