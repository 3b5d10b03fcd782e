// Package rxereplay replays captures of softfabric talking to Linux Soft-RoCE
// (rdma_rxe, kernel 6.1, rdma-core and perftest tools) against softfabric's
// parser and transport, so that a change in what we parse, what we answer or
// how we recover shows up in `go test ./...` without the lab guest.
//
// The captures are test/fixtures/rxe/*.pcapng, recorded by softfabric itself
// (pcaplink: interface 0 holds the frames it received from rxe, interface 1
// the frames it sent) by test/interop/capture.sh. softfabric is 198.18.1.1,
// rxe 198.18.1.2, path MTU 1024. A file named *-sf-client has softfabric as
// the requester, *-rxe-client has rxe as the requester (the ping-pongs send
// both ways); *-loss files were recorded with loss on one side (20 % with
// softfabric as the requester, 10 % with rxe).
//
// The tests are pure Go: no kernel, no root, virtual time, a few
// milliseconds each.
//
//   - parse_test.go: every frame parses and carries a valid ICRC; a golden
//     summary of each file (testdata/summary.golden, rewritten by
//     `go test ./test/rxereplay -run TestSummary -update`); and pins of rxe's
//     wire behaviour as seen: UDP source ports, BTH fields, AckReq, AETH
//     placement, the atomic acknowledge, DETH, IPv4 headers.
//   - responder_test.go: the *-rxe-client files. softfabric queue pairs are
//     rebuilt as they were, rxe's requests are fed in capture order, and
//     what softfabric sends back must equal what it sent then, byte for
//     byte; memory, receive completions and UD source addresses are checked.
//   - responder_loss_test.go: the *-rxe-client-loss files. The same replay,
//     except that frames the fault injector dropped above the capture may
//     be missing from it (only where rxe shows it never got them); every
//     frame softfabric sends is held to the rules of an IBTA responder (one
//     sequence NAK per gap, duplicates ACKed, read requests answered from
//     the PSN and address they name), also with every request delivered a
//     second time; nothing is placed or executed twice. And pins of how
//     rxe's requester recovers: go back N on a NAK; ask again for the
//     oldest incomplete read from its first missing packet, and for later
//     reads whole.
//   - requester_test.go: the *-sf-client files. The work requests softfabric
//     posted are rebuilt from its own frames and posted again, rxe's
//     responses fed in order: everything completes with the data rxe sent.
//     The loss captures are replayed in virtual time, and the recovery they
//     show (rxe's sequence NAKs, softfabric's repeated reads, rxe's replayed
//     read responses) is checked against the capture itself.
//   - cm_test.go, cm_replay_test.go: the RDMA-CM captures (rping through
//     rdma_cm both ways, rdmacm-rping-*, and rxe's unanswered REQ in
//     rdmacm-req.pcap). Every MAD on QP1 parses as a CM message and the
//     comm IDs, TIDs, QPNs, PSNs and rdma_cm header tie the exchange
//     together; a fresh ibcm.Agent, configured and driven as fabric drives
//     it and fed rxe's MADs at their capture times, sends byte for byte
//     the MADs softfabric sent; rxe's REQ and its retransmissions get a
//     REJ "invalid service ID" without a listener, one connection with one.
//
// fixture_test.go has what they share: loading and describing frames,
// rebuilding connections and messages from a capture, rewriting rkeys, and
// the replayer that delivers frames as the engine does.
package rxereplay
