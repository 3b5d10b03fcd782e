// Package abi is the hfi1 character device's user ABI in Go: the ioctl
// structures with their exact C layouts, the ioctl numbers, the mmap token
// encoding and region table, and the bit fields of the words the chip and
// user space exchange (PBC, RHF, RHE, credit-return word, KDETH).
//
// Nothing here performs a system call. Structures are encoded to and from the
// byte-exact little-endian images the driver copies with copy_{from,to}_user,
// so that the same bytes travel through the real ioctl and the model.
// Sources are cited as in ../shared/hfi1-abi.md: [K] the hfi1 driver,
// [O] libfabric's OPX provider, [P] PSM2, [C] the hfi2 tree.
package abi
