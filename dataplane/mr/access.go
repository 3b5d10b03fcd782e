package mr

import "strconv"

// Access is a set of permissions granted to a region when it is registered,
// and the set a request needs.
type Access uint32

// Access flags, as IBV_ACCESS_*. Reading a region locally needs no flag.
const (
	LocalWrite Access = 1 << iota
	RemoteWrite
	RemoteRead
	RemoteAtomic

	accessAll = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic
)

var accessNames = [...]string{"LocalWrite", "RemoteWrite", "RemoteRead", "RemoteAtomic"}

// String returns the flags joined by "|", e.g. "LocalWrite|RemoteRead"; "0"
// for none; bits with no name as one hex number at the end.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var s string
	for i, name := range accessNames {
		if a&(1<<i) == 0 {
			continue
		}
		if s != "" {
			s += "|"
		}
		s += name
	}
	if rest := a &^ accessAll; rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}

// valid reports whether a may be granted at registration. Verbs refuses
// remote write and remote atomic without local write (ib_check_mr_access):
// the region's owner would otherwise have granted a peer more than itself.
func (a Access) valid() bool {
	if a&^accessAll != 0 {
		return false
	}
	return a&(RemoteWrite|RemoteAtomic) == 0 || a&LocalWrite != 0
}
