package abi

// Poll types for POLL_TYPE ([K] include/uapi/rdma/hfi/hfi1_user.h:170-171,
// HFI1_POLL_TYPE_*): what poll(2) on a context's file waits for
// (file_ops.c hfi1_poll). The driver stores the ioctl's int as the
// context's u16 poll_type without checking it (file_ops.c:314-318); a
// context starts at 0, ANYRCV (its hfi1_ctxtdata is kzalloc'd, init.c:385),
// and poll(2) answers POLLERR for any value but these two.
const (
	// PollTypeAnyRcv: poll reports POLLIN while the RcvHdrQ holds entries
	// past RcvHdrHead as software last wrote it; when it holds none, the
	// poll arms the context's receive-available interrupt, which wakes it
	// on the next packet and disarms itself (file_ops.c poll_next, intr.c
	// handle_user_interrupt).
	PollTypeAnyRcv = 0
	// PollTypeUrgent: poll reports POLLIN once for each urgent interrupt
	// (a packet with KDETH.Intr) that came while a poll waited for one
	// (file_ops.c poll_urgent). PSM's receive thread uses it.
	PollTypeUrgent = 1
)
