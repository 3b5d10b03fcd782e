module github.com/softfabric/softfabric

go 1.26.8

require github.com/google/gopacket v1.1.19
