// Package faulty wraps any link.Link to reorder, delay, drop, duplicate or
// corrupt the frames it transmits, from a seeded random source: a debugging
// aid for watching a transport cope with a bad network over a real link
// (an AF_XDP socket), which memlink offers only between two in-memory ends.
// The receive side passes through.
//
// Faults have memlink's meaning. A frame given to Send goes through these
// steps:
//
//  1. Sent is counted.
//  2. With probability Loss it is dropped (Lost).
//  3. With probability Duplicate a second copy is made (Duplicated); each
//     copy goes through the next steps on its own.
//  4. With probability Corrupt one random bit of the copy is flipped
//     (Corrupted).
//  5. It is due Delay after Send. With probability Reorder it is held back
//     further (Reordered): by a uniform extra delay in (0, ReorderDelay],
//     or, with ReorderDelay 0, until the next frame sent, behind which it
//     then goes (a swap of neighbours). At most one frame is held for a
//     swap at a time, and it is never held past its due time: a Recv or
//     Flush after it releases it (a Send does not, so that it can swap
//     across batches).
//  6. A copy due now goes to the wrapped link at once, within the same
//     Send call; one due later is copied into the wrapper's buffers and
//     held (Delayed when Delay alone holds it). When Capacity copies are
//     already held, it goes at once instead (Overflow): out of order, but
//     never dropped by the wrapper.
//
// Held frames go to the wrapped link in order of their due time, first
// come first among equals, on the first Send, Recv or Flush after that
// time: an engine that busy-polls Recv releases them within a poll. Frames
// not reordered keep their order, delayed or not (except Overflow).
//
// Send keeps the wrapped link's backpressure: when that link refuses frames
// due now, Send reports how many of the given frames were taken (sent, held
// or dropped) and undoes its decisions about the rest, so a retry of them
// draws afresh and the counters count each frame once. While held frames
// that are due are refused, Send takes nothing. Counters satisfy
// Sent + Duplicated = Delivered + Lost + Held at every moment.
//
// For a given Seed, Faults and sequence of calls (with the same behaviour
// of the wrapped link), the faults fall on the same frames every run.
// Delay is measured on Config.Now; tests drive a virtual clock with it.
//
// A Link is owned by one goroutine, like the links it wraps. Its buffers
// come from a free list that grows to about Capacity plus a batch, so a
// warm Link allocates nothing.
package faulty
