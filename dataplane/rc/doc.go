// Package rc implements the InfiniBand Reliable Connected transport as a pure
// state machine: a queue pair takes received packets and the current time,
// and produces packets to send, completions, and data placed in registered
// memory. It makes no system calls, starts no goroutines and takes no locks;
// one goroutine owns a queue pair (the worker of its receive queue, or a
// test).
//
// The queue pair is split by role, after the IBTA and Linux rxe:
//
//   - requester.go: segments send queue work into packets, assigns PSNs,
//     enforces fences and the read/atomic limit, retransmits go-back-N;
//   - completer.go: consumes ACKs, NAKs, read responses and atomic
//     acknowledges, places response data, completes work in order;
//   - responder.go: checks PSNs, executes requests against memory regions
//     and the receive queue, answers with coalesced ACKs, NAKs, read
//     responses and atomic acknowledges, and replays duplicates.
package rc
