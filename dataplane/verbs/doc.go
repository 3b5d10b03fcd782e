// Package verbs holds the backend-neutral objects of the transport engine
// that applications see through the verbs-level API: work requests,
// completions and their statuses, completion queues, receive queues (plain
// and shared) and the queue pair state machine with its attributes.
//
// The types here carry no behaviour tied to a wire format; the RC and UD
// engines (packages rc and ud) and, later, the HFI backend consume them.
package verbs
