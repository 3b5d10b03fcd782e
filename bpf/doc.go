// Package bpf holds the XDP classifier, softfabric's analog of the HFI's
// Receive Side Matching: a BPF program that parses Eth/IP/UDP 4791/BTH,
// checks the BTH version, the P_Key table and a table of match rules, looks
// the destination QP up and redirects RoCEv2 frames to the AF_XDP socket of
// their context on the queue they arrived on. Everything else goes to the
// kernel untouched.
//
// The C source is classifier.c; classifier_bpfel.go and classifier_bpfel.o
// are generated from it by bpf2go (make generate) and committed.
package bpf
