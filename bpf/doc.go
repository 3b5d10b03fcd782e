// Package bpf will hold the XDP classifier: a BPF program that parses
// Eth/IP/UDP 4791/BTH, checks P_Keys and QPNs, and redirects RoCEv2 frames to
// AF_XDP sockets by rule. Not built yet.
package bpf
