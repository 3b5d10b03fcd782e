// Package test will hold end-to-end tests across network namespaces: veth
// pairs, real XDP and AF_XDP, and the real CLI. Not built yet.
package test
