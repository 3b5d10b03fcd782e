// Package deps pins modules that packages being written depend on, so that
// go.mod keeps them while those packages are in progress. Remove an import
// here once a real package imports the module.
package deps

import (
	_ "github.com/mdlayher/socket"
	_ "github.com/vishvananda/netlink"
)
