package mad

// DREQ is a disconnect request (IBTA Table 112).
type DREQ []byte

// DREQFields describes a DREQ for Encode.
type DREQFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: the receiver's QPN, checked by the kernel
	PrivateData  []byte // at most DREQPrivateDataSize bytes
}

// IsValid reports whether r is long enough for a DREQ.
func (r DREQ) IsValid() bool { return len(r) >= DataSize }

// LocalCommID returns the sender's communication ID.
func (r DREQ) LocalCommID() uint32 { return get32(r, idsLocalCommID) }

// RemoteCommID returns the receiver's communication ID.
func (r DREQ) RemoteCommID() uint32 { return get32(r, idsRemoteCommID) }

// RemoteQPN returns the receiver's QPN (or EECN).
func (r DREQ) RemoteQPN() uint32 { return get24(r, dreqRemoteQPN) }

// PrivateData returns the 220 bytes of private data.
func (r DREQ) PrivateData() []byte { return r[dreqPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. PrivateData aliases r.
func (r DREQ) Fields() DREQFields {
	return DREQFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(),
		RemoteQPN: r.RemoteQPN(), PrivateData: r.PrivateData(),
	}
}

// Encode writes the whole DREQ described by f.
func (r DREQ) Encode(f *DREQFields) {
	clear(r[:DataSize])
	put32(r, idsLocalCommID, f.LocalCommID)
	put32(r, idsRemoteCommID, f.RemoteCommID)
	put24(r, dreqRemoteQPN, f.RemoteQPN)
	copy(r.PrivateData(), f.PrivateData)
}

// DREP is a disconnect reply (IBTA Table 113).
type DREP []byte

// DREPFields describes a DREP for Encode.
type DREPFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // at most DREPPrivateDataSize bytes
}

// IsValid reports whether r is long enough for a DREP.
func (r DREP) IsValid() bool { return len(r) >= DataSize }

// LocalCommID returns the sender's communication ID.
func (r DREP) LocalCommID() uint32 { return get32(r, idsLocalCommID) }

// RemoteCommID returns the receiver's communication ID.
func (r DREP) RemoteCommID() uint32 { return get32(r, idsRemoteCommID) }

// PrivateData returns the 224 bytes of private data.
func (r DREP) PrivateData() []byte { return r[drepPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. PrivateData aliases r.
func (r DREP) Fields() DREPFields {
	return DREPFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), PrivateData: r.PrivateData()}
}

// Encode writes the whole DREP described by f.
func (r DREP) Encode(f *DREPFields) {
	clear(r[:DataSize])
	put32(r, idsLocalCommID, f.LocalCommID)
	put32(r, idsRemoteCommID, f.RemoteCommID)
	copy(r.PrivateData(), f.PrivateData)
}
