package fabric

type rdmState struct{ ud interface{ QPN() uint32 } }
type rdmTx struct{}

func (ep *Endpoint) rdmEnable() error { return ErrNotSupported }
func (ep *Endpoint) rdmTeardown()     {}
func (ep *Endpoint) rdmService() bool { return false }
func (ep *Endpoint) rdmSend(b []byte, desc Desc, dst Addr, ctx, data, tag uint64, f Flags) error {
	return ErrNotSupported
}
func (ep *Endpoint) rdmRecv(b []byte, desc Desc, src Addr, ctx, tag, ignore uint64, f Flags) error {
	return ErrNotSupported
}

func (ep *Endpoint) rdmStats(s *TransportStats) {}
