package abi

// Linux _IOC encoding (asm-generic/ioctl.h), which x86-64 and arm64 use.
const (
	iocNRBits   = 8
	iocTypeBits = 8
	iocSizeBits = 14

	iocNRShift   = 0
	iocTypeShift = iocNRShift + iocNRBits
	iocSizeShift = iocTypeShift + iocTypeBits
	iocDirShift  = iocSizeShift + iocSizeBits

	// IOCNone, IOCWrite and IOCRead are the _IOC direction bits, named from
	// user space's point of view as the kernel names them.
	IOCNone  = 0
	IOCWrite = 1
	IOCRead  = 2
)

// IOC computes an ioctl number exactly as the kernel's _IOC macro does.
func IOC(dir, typ, nr, size uint32) uint32 {
	return dir<<iocDirShift | size<<iocSizeShift | typ<<iocTypeShift | nr<<iocNRShift
}

// IOCSize is _IOC_SIZE: the argument size encoded in an ioctl number.
func IOCSize(cmd uint32) int { return int(cmd>>iocSizeShift) & (1<<iocSizeBits - 1) }

// IOCDir is _IOC_DIR.
func IOCDir(cmd uint32) uint32 { return cmd >> iocDirShift & 3 }

// IOCNR is _IOC_NR.
func IOCNR(cmd uint32) uint32 { return cmd >> iocNRShift & (1<<iocNRBits - 1) }

// IOCType is _IOC_TYPE.
func IOCType(cmd uint32) uint32 { return cmd >> iocTypeShift & (1<<iocTypeBits - 1) }

// IoctlMagic is RDMA_IOCTL_MAGIC, shared by all hfi1 ioctls.
const IoctlMagic = 0x1b

// hfi1 command numbers (HFI1_CMD_*); the ioctl nr is 0xE0 plus these.
const (
	cmdAssignCtxt   = 1
	cmdCtxtInfo     = 2
	cmdUserInfo     = 3
	cmdTIDUpdate    = 4
	cmdTIDFree      = 5
	cmdCreditUpd    = 6
	cmdRecvCtrl     = 8
	cmdPollType     = 9
	cmdAckEvent     = 10
	cmdSetPKey      = 11
	cmdCtxtReset    = 12
	cmdTIDInvalRead = 13
	cmdGetVers      = 14

	cmdBase = 0xE0
)

// The hfi1 ioctls, encoded as rdma_user_ioctl.h does. CTXT_INFO and
// USER_INFO are _IOW although the driver fills the structure: the number is
// what matters, and the direction bits are part of it.
var (
	IoctlAssignCtxt   = IOC(IOCRead|IOCWrite, IoctlMagic, cmdBase+cmdAssignCtxt, UserInfoSize)
	IoctlCtxtInfo     = IOC(IOCWrite, IoctlMagic, cmdBase+cmdCtxtInfo, CtxtInfoSize)
	IoctlUserInfo     = IOC(IOCWrite, IoctlMagic, cmdBase+cmdUserInfo, BaseInfoSize)
	IoctlTIDUpdate    = IOC(IOCRead|IOCWrite, IoctlMagic, cmdBase+cmdTIDUpdate, TIDInfoSize)
	IoctlTIDFree      = IOC(IOCRead|IOCWrite, IoctlMagic, cmdBase+cmdTIDFree, TIDInfoSize)
	IoctlCreditUpd    = IOC(IOCNone, IoctlMagic, cmdBase+cmdCreditUpd, 0)
	IoctlRecvCtrl     = IOC(IOCWrite, IoctlMagic, cmdBase+cmdRecvCtrl, 4)
	IoctlPollType     = IOC(IOCWrite, IoctlMagic, cmdBase+cmdPollType, 4)
	IoctlAckEvent     = IOC(IOCWrite, IoctlMagic, cmdBase+cmdAckEvent, 8)
	IoctlSetPKey      = IOC(IOCWrite, IoctlMagic, cmdBase+cmdSetPKey, 2)
	IoctlCtxtReset    = IOC(IOCNone, IoctlMagic, cmdBase+cmdCtxtReset, 0)
	IoctlTIDInvalRead = IOC(IOCRead|IOCWrite, IoctlMagic, cmdBase+cmdTIDInvalRead, TIDInfoSize)
	IoctlGetVers      = IOC(IOCRead, IoctlMagic, cmdBase+cmdGetVers, 4)
)

// IoctlName names an hfi1 ioctl number for errors and logs.
func IoctlName(cmd uint32) string {
	switch cmd {
	case IoctlAssignCtxt:
		return "ASSIGN_CTXT"
	case IoctlCtxtInfo:
		return "CTXT_INFO"
	case IoctlUserInfo:
		return "USER_INFO"
	case IoctlTIDUpdate:
		return "TID_UPDATE"
	case IoctlTIDFree:
		return "TID_FREE"
	case IoctlCreditUpd:
		return "CREDIT_UPD"
	case IoctlRecvCtrl:
		return "RECV_CTRL"
	case IoctlPollType:
		return "POLL_TYPE"
	case IoctlAckEvent:
		return "ACK_EVENT"
	case IoctlSetPKey:
		return "SET_PKEY"
	case IoctlCtxtReset:
		return "CTXT_RESET"
	case IoctlTIDInvalRead:
		return "TID_INVAL_READ"
	case IoctlGetVers:
		return "GET_VERS"
	}
	return "ioctl(unknown)"
}
