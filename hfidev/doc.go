// Package hfidev drives Omni-Path (WFR) and CN5000 (JKR) HFI contexts
// through the hfi1 driver's user API, /dev/hfi1_N, as OPX and PSM2 do.
//
// Everything goes through the system-call seam in hfidev/sys: sys.Unix on
// a real device node, or a modeled unit from hfidev/model. OpenContext runs
// the driver's set-up sequence on either; OpenUnit uses the real device and
// only when its node exists — the model is never substituted for it
// (OpenUnitIn is the same over a given node directory and system calls:
// a test's fake /dev served by the model).
// The ABI itself (structures, ioctl numbers, tokens, bit fields) lives in
// hfidev/abi. So far context set-up, PIO send and receive (Receiver: the
// RcvHdrQ polled by RcvSeq or the DMA'd tail, payloads as views into the
// eager buffers, lazy head writes) and EAGER SDMA (SDMA: writev requests,
// completions reaped in order) exist, and the RC/UD transport runs over
// contexts through hfidev/hfilink (a dataplane link) and hfidev/hfidevice
// (a device on such links); TID does not yet. Hardware support is verified
// against the model only; see docs/hfidev.md.
package hfidev
