// Package model is a software model of an hfi1 unit behind the sys seam:
// it answers open, ioctl, mmap and close on a modeled hfi1_N exactly as the
// hfi1 driver does — the same argument checks, in the same order, with the
// same errno — and backs every mapped region with plain memory that both
// user code and the model see.
//
// Modeled so far: GET_VERS; ASSIGN_CTXT, including the Cornelis driver's
// use of hfi1_user_info.pad; CTXT_INFO; USER_INFO; mmap of every region a
// non-shared context has, by token; PIO send — the SOP and non-SOP
// apertures as doorbells, packet assembly from 64-byte blocks, the block
// ring wrapping at the context's credits, the credit-return word written
// on PBC.CreditReturn, at the threshold or on CREDIT_UPD, halting on
// protocol errors and CTXT_RESET. Sent packets go to an Egress function;
// Connect joins two units with a Wire so that each one's packets reach the
// other's Ingress. Receive: Ingress checks a 9B KDETH packet (DLID, KDETH
// opcode and QP, context, JKey) and the context writes its RcvHdrQ entry —
// header at HdrqOffset, RHE on JKR, the RHF with its RcvSeq last — packs
// the payload into eager buffers, drops on a full queue (RcvHdrHead read
// as software last wrote it) and writes TidErr headers when the eager
// buffers are full (RcvEgrIndexHead); expected (TID) packets get TidErr,
// since no TID is ever programmed. SDMA: Writev checks EAGER requests as
// hfi1_user_sdma_process_request does, with its errno (EINVAL, EBADSLT,
// ENOSPC, ECOMM, EFAULT, EIO; ERROR and the errno in the slot once it is
// claimed), cuts them into packets with the driver's per-packet rewrite
// and completes them, at once or, held, in any order. poll(2) on a
// context's file (Poll, with a Waker for the eventfd beside it), POLL_TYPE
// and RECV_CTRL as the driver does them, with the receive-available and
// urgent interrupts that wake a sleeping poll (poll.go). Later additions
// (EXPECTED SDMA and the TID ioctls, ACK_EVENT and the link events, 16B
// packets) are described in docs/hfidev.md.
//
// Not modeled yet, and answered with ErrNotModeled rather than pretended:
// SET_PKEY, the NODROP capabilities, and context sharing.
// Modeled devices are named "model:hfi1_N" so that no path of theirs can be
// taken for a real /dev node.
package model
