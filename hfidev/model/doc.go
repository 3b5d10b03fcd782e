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
// protocol errors and CTXT_RESET. Sent packets go to an Egress function.
//
// Not modeled yet, and answered with ErrNotModeled rather than pretended:
// receive (RcvHdrQ, eager, RHEQ writes), SDMA (writev), TID ioctls,
// RECV_CTRL, POLL_TYPE, ACK_EVENT, SET_PKEY, and context sharing.
// Modeled devices are named "model:hfi1_N" so that no path of theirs can be
// taken for a real /dev node.
package model
